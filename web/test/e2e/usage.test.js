// Issue 16 item 3: a settled run's card says the tokens it used and the model the agent's
// gateway actually served, as text.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { launch, signUp } from './helpers.js';
import { fakeApi, run, ev, events } from './fake.js';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

test('a settled research run card shows "2,700 tokens · model qwen3-30b-a3b-q8"', async () => {
  const conv = { id: 'c1', title: 'Research', lastActivityAt: '2026-01-01T10:00:00Z', createdAt: '2026-01-01T10:00:00Z' };
  const usage = { inputTokens: 2500, outputTokens: 200, totalTokens: 2700, model: 'qwen3-30b-a3b-q8', requests: 2 };
  const page = await signUp(browser, {}, (p) => fakeApi(p, {
    conversations: [conv],
    messages: { c1: [{ id: 'm-r1', sequence: 1, role: 'user', text: 'Research tide tables', runId: 'r1', createdAt: '2026-01-01T10:00:00Z' }] },
    runs: { c1: [run('r1', { role: 'research', status: 'completed', terminal: true, usage })] },
    events: { r1: events(ev('message.delta', { text: 'Tides.' }),
      ev('run.completed', { status: 'completed', usage: { inputTokens: 2500, outputTokens: 200, totalTokens: 2700 } })) },
  }));
  await page.waitForFunction(() => /tokens/.test(document.querySelector('.run')?.innerText || ''));
  const card = await page.locator('.run').first().innerText();
  assert.match(card, /2,700 tokens · model qwen3-30b-a3b-q8/, card);
  assert.deepEqual(page.errors, []);
});
