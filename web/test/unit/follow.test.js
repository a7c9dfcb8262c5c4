import { test } from 'node:test';
import assert from 'node:assert/strict';
import { applyEvents, newRunState, follow } from '../../js/follow.js';
import { ApiClient, ApiError, NetworkError, newRequestId } from '../../js/api.js';

const ev = (sequence, type, data = {}) => ({ sequence, type, data });

test('events apply in order exactly once', () => {
  const s = newRunState({ id: 'r', status: 'queued' });
  applyEvents(s, [ev(1, 'run.status', { status: 'running', phase: 'thinking' }), ev(2, 'message.delta', { text: 'Hel' })]);
  applyEvents(s, [ev(2, 'message.delta', { text: 'Hel' }), ev(3, 'message.delta', { text: 'lo' }), ev(5, 'message.delta', { text: '!' })]);
  assert.equal(s.text, 'Hello', 'duplicates and gaps are dropped');
  assert.equal(s.seq, 3);
  applyEvents(s, [ev(4, 'message.reset'), ev(5, 'message.delta', { text: 'Again' })]);
  assert.equal(s.text, 'Again');
  applyEvents(s, [ev(6, 'approval.request', { requestId: 'a1', command: 'ls' })]);
  assert.equal(s.status, 'waiting_for_approval');
  assert.equal(s.approval.requestId, 'a1');
  applyEvents(s, [ev(7, 'approval.responded', { choice: 'once' }), ev(8, 'artifact.created', { artifactId: 'f1', filename: 'a.md', size: 3 }), ev(9, 'run.completed', { messageId: 'm' })]);
  assert.equal(s.status, 'completed');
  assert.equal(s.artifacts[0].id, 'f1');
  assert.deepEqual(s.notSaved, []);
});

test('a completed run keeps the files it could not save and the writes that failed', () => {
  const s = newRunState({ id: 'r', status: 'running' });
  applyEvents(s, [ev(1, 'tool.started', { tool: 'write_file', preview: 'notes.md' }), ev(2, 'tool.completed', { tool: 'write_file', error: true }),
    ev(3, 'run.completed', { status: 'completed', skippedArtifacts: [{ Name: '/member/work/runs/r1/notes.md', Reason: 'write_file failed: Refusing to overwrite' }] })]);
  assert.equal(s.status, 'completed');
  assert.equal(s.tools[0].error, true);
  assert.deepEqual(s.notSaved, [{ name: '/member/work/runs/r1/notes.md', reason: 'write_file failed: Refusing to overwrite' }]);
});

test('requestIds are stable-format tokens', () => {
  const a = newRequestId(), b = newRequestId();
  assert.match(a, /^[A-Za-z0-9._:-]{1,64}$/);
  assert.notEqual(a, b);
});

function fakeFetch(handler) {
  const calls = [];
  return { calls, fetch: async (url, init) => { calls.push({ url, init }); return handler(url, init, calls.length); } };
}
const json = (status, body, headers = {}) => new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json', ...headers } });

test('the client refreshes the JWT once on 401 and reads the error envelope', async () => {
  const tokens = [];
  const f = fakeFetch((url, init, n) => (n === 1 ? json(401, { error: { code: 'unauthenticated', message: 'expired' } }) : json(429, { error: { code: 'rate_limited', message: 'slow down' } }, { 'Retry-After': '3' })));
  const api = new ApiClient({ getToken: async (force) => { tokens.push(force); return force ? 'new' : 'old'; }, fetchImpl: f.fetch });
  await assert.rejects(api.system(), (e) => e instanceof ApiError && e.code === 'rate_limited' && e.retryAfter === 3);
  assert.deepEqual(tokens, [false, true]);
  assert.equal(f.calls[1].init.headers.Authorization, 'Bearer new');
  assert.ok(!f.calls[0].url.includes('new') && !f.calls[0].url.includes('old'), 'no token in the URL');
  const down = new ApiClient({ getToken: async () => 't', fetchImpl: async () => { throw new TypeError('Failed to fetch'); } });
  await assert.rejects(down.system(), NetworkError);
});

test('large downloads are fetched in ranges and reassembled', async () => {
  const data = new Uint8Array(10 * 1024);
  for (let i = 0; i < data.length; i++) data[i] = i % 251;
  const f = fakeFetch((url, init) => {
    const [, a, b] = init.headers.Range.match(/bytes=(\d+)-(\d+)/).map(Number);
    return new Response(data.slice(a, b + 1), { status: 206 });
  });
  const api = new ApiClient({ getToken: async () => 't', fetchImpl: f.fetch });
  const blob = await api.download({ id: 'f1', size: data.length }, 4096);
  assert.equal(f.calls.length, 3);
  assert.deepEqual(new Uint8Array(await blob.arrayBuffer()), data);
});

test('follow resumes from its last sequence after network loss', async () => {
  const batches = [
    { events: [ev(1, 'message.delta', { text: 'a' })], next: 1, status: 'running', terminal: false },
    'offline',
    { events: [ev(2, 'message.delta', { text: 'b' }), ev(3, 'run.completed')], next: 3, status: 'completed', terminal: true },
  ];
  const afters = [];
  // The stream service is unreachable (a proxy's 502): the long-poll carries the run.
  const api = { openStream: async () => { throw new ApiError(502, 'http_502', 'Bad Gateway'); },
    events: async (id, after) => { afters.push(after); const b = batches.shift(); if (b === 'offline') throw new NetworkError('down'); return b; } };
  const s = newRunState({ id: 'r', status: 'queued' });
  const win = { requestAnimationFrame: (f) => f() };
  const f = follow(api, s, () => {}, { win, timing: { backoffMin: 1, busyIntervalMs: 0 } });
  await f.done;
  assert.deepEqual(afters, [0, 1, 1]);
  assert.equal(s.text, 'ab');
  assert.equal(s.status, 'completed');
});
