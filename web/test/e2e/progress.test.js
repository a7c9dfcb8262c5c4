// Issue 17: progress in real units where the harness counts them, never a percentage.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { launch, signUp } from './helpers.js';
import { fakeApi, run, ev, events } from './fake.js';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

test('a research job shows "2 of 5 sources" from its counts, and no percentage', async () => {
  const conv = { id: 'c1', title: 'Research', lastActivityAt: '2026-01-01T10:00:00Z', createdAt: '2026-01-01T10:00:00Z' };
  const page = await signUp(browser, {}, (p) => fakeApi(p, {
    conversations: [conv],
    messages: { c1: [{ id: 'm-r1', sequence: 1, role: 'user', text: 'Research tide tables', runId: 'r1', createdAt: '2026-01-01T10:00:00Z' }] },
    runs: { c1: [run('r1', { role: 'research', status: 'running', terminal: false, phase: 'reading sources',
      progress: { completed: 2, total: 5, percent: 40 } })] },
    events: { r1: events(ev('run.status', { status: 'running', phase: 'reading sources', progress: { completed: 2, total: 5, unit: 'sources' } })) },
  }));
  await page.waitForFunction(() => /2 of 5 sources/.test(document.querySelector('.run')?.innerText || ''));
  const card = await page.locator('.run').first().innerText();
  assert.match(card, /reading sources/);
  assert.doesNotMatch(card, /%/, card);
  assert.deepEqual(page.errors, []);
});
