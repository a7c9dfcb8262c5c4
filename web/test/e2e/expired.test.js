// Issue 11: an approval nobody answered in time expired (the harness denied the command);
// the card says so, with when, and never "You denied".
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { launch, signUp } from './helpers.js';
import { fakeApi, run, ev, events } from './fake.js';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

test('an expired approval shows as expired with its time, not as the person\'s denial', async () => {
  const conv = { id: 'c1', title: 'Cleanup', lastActivityAt: '2026-01-01T10:00:00Z', createdAt: '2026-01-01T10:00:00Z' };
  const at = '2026-01-01T10:04:00Z';
  const page = await signUp(browser, {}, (p) => fakeApi(p, {
    conversations: [conv],
    messages: { c1: [{ id: 'm-r1', sequence: 1, role: 'user', text: 'Clean up /tmp please', runId: 'r1', createdAt: at }] },
    runs: { c1: [run('r1', { role: 'coding', status: 'completed' })] },
    events: { r1: events(ev('message.delta', { text: 'I will clean it.' }),
      ev('approval.request', { requestId: 'q', command: 'rm -rf /tmp/*', description: 'dangerous command: terminal' }),
      { ...ev('approval.responded', { requestId: 'q', choice: 'deny', reason: 'the approval expired before anyone answered; the harness denied the command' }), at },
      ev('message.delta', { text: 'Nobody approved, so I left /tmp alone.' }), ev('run.completed', {})) },
  }));
  await page.waitForSelector('.run .decisions li');
  const card = await page.locator('.run').first().innerText();
  const hhmm = await page.evaluate((t) => new Date(t).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' }), at);
  assert.match(card, /Nobody answered in time: the approval for rm -rf \/tmp\/\* expired at .*\d:\d\d.*, so it was not run\./, card);
  assert.ok(card.includes(hhmm), `the time ${hhmm} is shown: ${card}`);
  assert.match(card, /an approval expired/);
  assert.doesNotMatch(card, /You denied|you denied/, card);
  assert.equal(await page.locator('.run .approval:not([hidden])').count(), 0, 'nothing left to answer');
  assert.deepEqual(page.errors, []);
});
