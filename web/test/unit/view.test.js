import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { applyEvents, newRunState, denied, expired } from '../../js/follow.js';
import { statusLine, needsCard, titleFrom, decisionWords, progressWords } from '../../js/view.js';
import { humanDuration, tidy, apiErrorText, runErrorText } from '../../js/errors.js';

const ev = (sequence, type, data = {}) => ({ sequence, type, data });

test('turns of a tool run are separated, never glued ("that.The")', () => {
  const s = newRunState({ id: 'r', status: 'running', role: 'coding' });
  applyEvents(s, [ev(1, 'message.delta', { text: 'Let' }), ev(2, 'message.delta', { text: ' me check that.' }),
    ev(3, 'approval.request', { requestId: 'a', command: 'ls' }), ev(4, 'approval.responded', { requestId: 'a', choice: 'once' }),
    ev(5, 'tool.started', { tool: 'terminal' }), ev(6, 'tool.completed', { tool: 'terminal' }),
    ev(7, 'message.delta', { text: 'The listing' }), ev(8, 'message.delta', { text: ' is done.' })]);
  assert.equal(s.text, 'Let me check that.\n\nThe listing is done.');
});

test('a denial is recorded with its command; a settled run asks nothing', () => {
  const s = newRunState({ id: 'r', status: 'running', role: 'coding' });
  applyEvents(s, [ev(1, 'approval.request', { requestId: 'a', command: 'rm -rf x' }), ev(2, 'approval.responded', { requestId: 'a', choice: 'deny' }),
    ev(3, 'run.completed', {})]);
  assert.ok(denied(s));
  assert.deepEqual(s.decisions, [{ requestId: 'a', choice: 'deny', command: 'rm -rf x' }]);
  const line = statusLine(s);
  assert.match(line.label, /denied/);
  assert.match(line.cls, /denied/);
  const c = newRunState({ id: 'r', status: 'running', role: 'coding' });
  applyEvents(c, [ev(1, 'approval.request', { requestId: 'a', command: 'ls' }), ev(2, 'run.cancelled', {})]);
  assert.equal(c.approval, null, 'a cancelled run has no pending approval');
  // Events that arrive after the terminal one never revive the run.
  applyEvents(c, [ev(3, 'run.status', { status: 'running' })]);
  assert.equal(c.status, 'cancelled');
});

test('status lines say each thing once and never show heartbeats while streaming', () => {
  const now = Date.now();
  const s = { ...newRunState({ id: 'r', status: 'waiting_for_approval', role: 'coding' }), phase: 'waiting for approval', lastSignAt: now };
  const l = statusLine(s, now);
  assert.equal(`${l.label} · ${l.detail}`.match(/approval/g).length, 1, JSON.stringify(l));
  const c = { ...newRunState({ id: 'r', status: 'running', role: 'chat', cancelRequested: true }), phase: 'cancelling', lastSignAt: now };
  const lc = statusLine(c, now);
  assert.equal(lc.label, 'cancelling…');
  assert.doesNotMatch(lc.detail, /cancel/);
  const r = { ...newRunState({ id: 'r', status: 'running', role: 'research' }), heartbeatAt: new Date(now - 8000).toISOString(), lastSignAt: now - 1000 };
  assert.doesNotMatch(JSON.stringify(statusLine(r, now)), /heartbeat|ago|news/);
  assert.match(statusLine({ ...r, lastSignAt: now - 45000 }, now).detail, /no news from the worker for 45 s/);
});

test('cards are only for work that needs one', () => {
  const chat = newRunState({ id: 'r', status: 'completed', role: 'chat' });
  chat.text = 'hi';
  assert.equal(needsCard(chat), false, 'no "completed" card on every chat turn');
  assert.equal(needsCard({ ...chat, status: 'running' }), false);
  assert.equal(needsCard({ ...chat, status: 'running', text: '' }, 2000), true, 'a slow first token shows "working"');
  for (const st of ['queued', 'failed', 'cancelled', 'interrupted', 'waiting_for_approval']) assert.equal(needsCard({ ...chat, status: st }), true, st);
  assert.equal(needsCard({ ...chat, role: 'research' }), true, 'long jobs keep their card');
});

test('titles come from the first message', () => {
  assert.equal(titleFrom('\n  Plan a trip to Lisbon  \nwith kids'), 'Plan a trip to Lisbon');
  const t = titleFrom('word '.repeat(40));
  assert.ok(t.length <= 61 && t.endsWith('…'), t);
});

test('errors are worded for people', () => {
  assert.equal(humanDuration('1m0s'), '1 minute');
  assert.equal(humanDuration('1h30m0s'), '1 hour 30 minutes');
  assert.equal(tidy('too many messages: at most 60 per 1m0s'), 'Too many messages: at most 60 per 1 minute');
  assert.equal(tidy('role must match ^[a-z][a-z0-9_-]{0,31}$'), '');
  assert.doesNotMatch(apiErrorText({ status: 400, code: 'invalid_role', message: 'role must match ^[a-z]$' }), /\^|\$/);
  assert.match(apiErrorText({ status: 429, code: 'rate_limited', message: 'too many messages: at most 60 per 1m0s', retryAfter: 3 }), /in 3 s/);
  assert.doesNotMatch(runErrorText('The gateway restarted before this run settled.'), /gateway/);
  assert.equal(runErrorText('', 'interrupted'), 'The run was interrupted before it finished.');
});

test('highlight.js is the pinned npm package, served from node_modules (no copy in web/)', () => {
  const lock = JSON.parse(readFileSync(new URL('../../package-lock.json', import.meta.url)));
  assert.equal(lock.packages['node_modules/@highlightjs/cdn-assets'].version, '11.12.0');
  assert.ok(existsSync(new URL('../../node_modules/@highlightjs/cdn-assets/es/highlight.min.js', import.meta.url)), 'run `make deps`');
  assert.equal(existsSync(new URL('../../vendor', import.meta.url)), false, 'web/vendor is gone: /vendor/* is mapped onto node_modules');
});

test('a request the server never answers fails fast as a network error (frozen server)', async () => {
  const { ApiClient, NetworkError } = await import('../../js/api.js');
  const hang = (url, init) => new Promise((_, rej) => init.signal.addEventListener('abort', () => rej(new DOMException('aborted', 'AbortError'))));
  const api = new ApiClient({ getToken: async () => 't', fetchImpl: hang, timeoutMs: 200 });
  const t0 = Date.now();
  const p = api.system();
  await new Promise((r) => setTimeout(r, 50));
  assert.ok(api.oldestOverdue() > 0, 'the watch sees the request waiting');
  await assert.rejects(p, (e) => e instanceof NetworkError && e.timeout);
  assert.ok(Date.now() - t0 < 1000);
  assert.equal(api.oldestOverdue(), 0);
  assert.equal(await api.health(100), false);
  // A long-poll is allowed its wait before it counts as overdue.
  const ctrl = new AbortController();
  const lp = api.events('r1', 0, 1, ctrl.signal);
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(api.oldestOverdue(), 0, 'still within its wait');
  ctrl.abort();
  await assert.rejects(lp, (e) => !(e instanceof NetworkError), 'a caller abort is not a network failure');
});

test('the service worker shell lists every module, vendored file and the favicon', async () => {
  const { readdirSync } = await import('node:fs');
  const sw = readFileSync(new URL('../../sw.js', import.meta.url), 'utf8');
  const want = [...readdirSync(new URL('../../js/', import.meta.url)).map((f) => '/js/' + f),
    // Every library the dev server's vendor map serves (scripts/dev/web.go).
    ...readFileSync(new URL('../../../scripts/dev/web.go', import.meta.url), 'utf8').match(/"\/vendor\/[\w.-]+\.js"/g).map((s) => s.slice(1, -1)),
    '/favicon.svg', '/styles.css', '/config.js'];
  assert.ok(want.includes('/vendor/highlight.js'));
  for (const f of want) assert.ok(sw.includes(`'${f}'`), `${f} missing from sw.js SHELL`);
});

test('an approval that expired reads as expired, with when, never as "You denied" (issue 11)', () => {
  const s = newRunState({ id: 'r1', status: 'running', role: 'coding' });
  applyEvents(s, [
    { sequence: 1, type: 'approval.request', data: { requestId: 'q1', command: 'rm -rf /tmp/x' } },
    { sequence: 2, type: 'approval.responded', at: '2026-01-01T10:04:00Z', data: { requestId: 'q1', choice: 'deny', reason: 'the approval expired before anyone answered; the harness denied the command' } },
    { sequence: 3, type: 'run.completed', data: {} },
  ]);
  assert.equal(denied(s), false, 'nobody denied it');
  assert.equal(expired(s), true);
  const line = statusLine(s);
  assert.equal(line.label, 'done · an approval expired');
  assert.doesNotMatch(line.label, /denied/);
  const words = decisionWords(s.decisions[0]).map((w) => (typeof w === 'string' ? w : w.code)).join('');
  assert.match(words, /^Nobody answered in time: the approval for rm -rf \/tmp\/x expired at .*\d{1,2}:\d{2}.*, so it was not run\.$/);
  assert.doesNotMatch(words, /You denied/);
  // A person's own denial still says so.
  const own = decisionWords({ choice: 'deny', command: 'ls' }).map((w) => (typeof w === 'string' ? w : w.code)).join('');
  assert.equal(own, 'You denied ls — it was not run.');
});

test('progress is shown in the harness\'s own units, never as a percentage', () => {
  assert.equal(progressWords({ completed: 3, total: 7, unit: 'files' }), '3 of 7 files');
  assert.equal(progressWords({ completed: 2, total: 5 }), '2 of 5 done');
  assert.equal(progressWords({ completed: 4, total: null, unit: 'steps' }), '4 steps done');
  assert.equal(progressWords({ completed: 4, total: null }), '', 'a bare count means nothing on its own');
  assert.equal(progressWords({ completed: 40, total: null, percent: 40 }), '', 'never a percentage');
  assert.equal(progressWords(null), '');
  const s = newRunState({ id: 'r1', status: 'running', role: 'research' });
  applyEvents(s, [{ sequence: 1, type: 'run.status', data: { status: 'running', phase: 'reading sources', progress: { completed: 2, total: 5, unit: 'sources' } } }]);
  const line = statusLine(s).detail;
  assert.match(line, /reading sources/);
  assert.match(line, /2 of 5 sources/);
  assert.doesNotMatch(line, /%/);
});

test('a card says why a run waits in every waiting state, with its position (issue 32)', () => {
  const now = Date.parse('2026-12-07T10:00:00Z');
  for (const status of ['queued', 'waiting_for_resource', 'running']) {
    const s = newRunState({ id: 'r', status, role: 'research', startedAt: '2026-12-07T09:58:00Z' });
    applyEvents(s, [ev(1, 'run.status', { status, phase: status === 'running' ? 'paused for a model swap' : 'waiting for resource',
      queueReason: 'the device is loading model code for another job', queuePosition: 2 })], now);
    const line = statusLine(s, now);
    assert.match(line.detail, /the device is loading model code for another job \(position 2\)/, status);
    assert.match(line.detail, /2 min/, `${status}: the time it has waited`);
    assert.ok(needsCard(s), `${status}: a waiting run has a card`);
  }
  // Not started yet: the time since it was queued, in every waiting state, chat included.
  for (const status of ['queued', 'waiting_for_resource', 'waiting_for_approval']) {
    const q = newRunState({ id: 'r', status, role: 'chat', queuedAt: '2026-12-07T09:56:00Z', startedAt: null });
    assert.match(statusLine(q, now).detail, /waiting 4 min/, status);
  }
  const w = newRunState({ id: 'r', status: 'waiting_for_resource', role: 'coding' });
  assert.equal(statusLine(w).label, 'waiting for the GPU');
  applyEvents(w, [ev(1, 'run.status', { status: 'waiting_for_resource', queuePosition: 3 })]);
  assert.match(statusLine(w).detail, /position 3/);
  // Once it runs, the reason is gone.
  applyEvents(w, [ev(2, 'run.status', { status: 'running', phase: 'thinking' })]);
  assert.doesNotMatch(statusLine(w).detail, /position/);
});

test('the phase follows what happens: thinking, running a tool, writing (issue 32)', () => {
  const s = newRunState({ id: 'r', status: 'running', role: 'coding' });
  applyEvents(s, [ev(1, 'run.status', { status: 'running', phase: 'thinking' })]);
  assert.match(statusLine(s).detail, /thinking/);
  applyEvents(s, [ev(2, 'tool.started', { tool: 'terminal' })]);
  assert.match(statusLine(s).detail, /running tool: terminal/);
  applyEvents(s, [ev(3, 'tool.completed', { tool: 'terminal' })]);
  assert.match(statusLine(s).detail, /thinking/);
  applyEvents(s, [ev(4, 'message.delta', { text: 'The listing' })]);
  assert.match(statusLine(s).detail, /writing/, 'not "thinking" while the answer is written');
  applyEvents(s, [ev(5, 'run.completed', {})]);
  assert.doesNotMatch(statusLine(s).detail, /writing|thinking/);
});
