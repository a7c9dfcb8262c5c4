import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SSEParser, readSSE, live, liveNote, showNote, unreachable, DELAYED_NOTE } from '../../js/sse.js';
import { ApiClient, ApiError, NetworkError } from '../../js/api.js';
import { follow, newRunState } from '../../js/follow.js';
import { watchFeed } from '../../js/feed.js';

const parseAll = (chunks) => {
  const p = new SSEParser();
  const out = [];
  for (const c of chunks) out.push(...p.feed(c));
  return { out, p };
};

test('SSE: messages split anywhere across chunks come out whole', () => {
  const text = 'id: 1\ndata: {"sequence":1}\n\nid: 2\nevent: end\ndata: {"status":"completed"}\n\n';
  const want = [{ id: '1', event: 'message', data: '{"sequence":1}' }, { id: '2', event: 'end', data: '{"status":"completed"}' }];
  for (let cut = 0; cut <= text.length; cut++) {
    assert.deepEqual(parseAll([text.slice(0, cut), text.slice(cut)]).out, want, `cut at ${cut}`);
  }
  assert.deepEqual(parseAll([...text]).out, want, 'one character at a time');
});

test('SSE: multi-line data, comments, CRLF and CR, fields without a space or value', () => {
  const { out, p } = parseAll([': hb\r\n\r\nid: 7\r\ndata: a\r\ndata:b\r\ndata\r\n\r', '\n: hb\rid:8\revent: reset\rdata: {"next":8}\r\r']);
  assert.deepEqual(out, [{ id: '7', event: 'message', data: 'a\nb\n' }, { id: '8', event: 'reset', data: '{"next":8}' }]);
  assert.equal(p.comments, 2);
  assert.equal(p.lastEventId, '8');
  // A message without data is not dispatched; its id still counts; an unfinished one waits.
  const q = parseAll(['id: 3\n\ndata: x', '\n']);
  assert.deepEqual(q.out, []);
  assert.equal(q.p.lastEventId, '3');
  assert.deepEqual(q.p.feed('\n'), [{ id: '3', event: 'message', data: 'x' }]);
  // A CR at a chunk's end and the LF opening the next one are one line end, not two.
  assert.deepEqual(parseAll(['data: 1\r', '\ndata: 2\r\n\r\n']).out, [{ id: '', event: 'message', data: '1\n2' }]);
});

const enc = new TextEncoder();
// A body as fetch gives it: chunks, then the end (or, with hold, nothing more until the
// request's signal aborts it, as a real fetch's body errors).
function sseBody(chunks, { hold = false, signal } = {}) {
  let i = 0;
  return new ReadableStream({
    start(c) { signal?.addEventListener('abort', () => c.error(new DOMException('aborted', 'AbortError'))); },
    async pull(c) {
      if (i < chunks.length) { c.enqueue(enc.encode(chunks[i++])); return; }
      if (hold) return new Promise(() => {});
      c.close();
    },
  });
}

test('readSSE decodes UTF-8 split inside a character', async () => {
  const bytes = enc.encode('data: {"text":"héllo ✓"}\n\n');
  const body = new ReadableStream({ start(c) { for (const b of bytes) c.enqueue(new Uint8Array([b])); c.close(); } });
  const got = [];
  await readSSE(body, async (m) => { got.push(...m); });
  assert.deepEqual(got.map((m) => JSON.parse(m.data).text), ['héllo ✓']);
});

test('unreachable: no answer, a proxy 5xx, or a 404 that is not the service envelope', () => {
  assert.ok(unreachable(new NetworkError('down')));
  for (const s of [502, 503, 504]) assert.ok(unreachable(new ApiError(s, 'http_' + s, '')));
  assert.ok(unreachable(new ApiError(404, 'http_404', '')));
  assert.ok(!unreachable(new ApiError(404, 'not_found', 'run not found')));
  assert.ok(!unreachable(new ApiError(401, 'unauthenticated', '')));
  assert.ok(!unreachable(new ApiError(429, 'rate_limited', '')));
});

const ev = (sequence, type, data = {}) => ({ sequence, type, data });
const frame = (e) => `id: ${e.sequence}\ndata: ${JSON.stringify(e)}\n\n`;
const sse = (chunks, opts) => new Response(sseBody(chunks, opts), { status: 200, headers: { 'Content-Type': 'text/event-stream' } });
const never = (init) => new Promise((_, rej) => init.signal.addEventListener('abort', () => rej(new DOMException('aborted', 'AbortError'))));
const win = () => ({ requestAnimationFrame: (f) => f(), navigator: { onLine: true } });

test('follow: a stream that drops mid-message resumes from the last applied sequence, exactly once', async () => {
  const e = [ev(1, 'message.delta', { text: 'Hel' }), ev(2, 'message.delta', { text: 'lo' }), ev(3, 'message.delta', { text: '!' }), ev(4, 'run.completed')];
  const calls = [];
  const api = new ApiClient({ getToken: async () => 'jwt', fetchImpl: async (url, init) => {
    calls.push({ url, last: init.headers['Last-Event-ID'] ?? null, auth: init.headers.Authorization });
    if (calls.length === 1) {
      const f2 = frame(e[1]);
      return sse([frame(e[0]) + f2.slice(0, 10), f2.slice(10, 20)]); // ends inside event 2
    }
    // The server replays from the cursor; a duplicate of 2 would be dropped anyway.
    return sse([frame(e[1]) + frame(e[2]), frame(e[3]) + 'event: end\ndata: {"status":"completed"}\n\n']);
  } });
  const s = newRunState({ id: 'r/1', status: 'running' });
  const f = follow(api, s, () => {}, { win: win(), timing: { backoffMin: 1 } });
  await f.done;
  assert.equal(s.text, 'Hello!');
  assert.equal(s.status, 'completed');
  assert.ok(s.done);
  assert.deepEqual(calls.map((c) => [c.url, c.last]), [['/stream/runs/r%2F1/events?after=0', '0'], ['/stream/runs/r%2F1/events?after=1', '1']]);
  assert.ok(calls.every((c) => c.auth === 'Bearer jwt' && !c.url.includes('jwt')), 'the JWT only in the header');
});

test('follow: a 401 on the stream refreshes the JWT once; a 404 envelope ends the run as not found', async () => {
  const tokens = [];
  let n = 0;
  const api = new ApiClient({ getToken: async (force) => { tokens.push(force); return force ? 'new' : 'old'; }, fetchImpl: async (url, init) => {
    n++;
    if (init.headers.Authorization === 'Bearer old') return new Response(JSON.stringify({ error: { code: 'unauthenticated', message: 'x' } }), { status: 401 });
    return new Response(JSON.stringify({ error: { code: 'not_found', message: 'run not found' } }), { status: 404, headers: { 'Content-Type': 'application/json' } });
  } });
  api.events = () => assert.fail('no long-poll for a run the stream service says is missing');
  const s = newRunState({ id: 'r', status: 'running' });
  await follow(api, s, () => {}, { win: win() }).done;
  assert.deepEqual(tokens, [false, true]);
  assert.equal(n, 2);
  assert.equal(s.error, 'run not found');
});

test('follow: falls back to the long-poll only while the stream is unreachable, pausing between empty answers, and says so', async (t) => {
  const T = { emptyPauseMs: 60, busyIntervalMs: 80, streamRetryMs: 400, backoffMin: 1 };
  let streamUp = false;
  const streamTries = [];
  const polls = [];
  const statuses = [];
  const api = new ApiClient({ getToken: async () => 't', fetchImpl: async (url) => {
    streamTries.push(Date.now());
    if (!streamUp) return new Response('404 page not found', { status: 404, headers: { 'Content-Type': 'text/plain' } });
    return sse([frame(ev(2, 'message.delta', { text: 'b' })) + frame(ev(3, 'run.completed')) + 'event: end\ndata: {"status":"completed"}\n\n']);
  } });
  api.events = async (id, after, wait) => {
    polls.push({ at: Date.now(), after, wait });
    if (polls.length === 1) return { events: [ev(1, 'message.delta', { text: 'a' })], next: 1, status: 'running', terminal: false };
    return { events: [], next: after, status: 'running', terminal: false }; // answered at once, empty
  };
  const s = newRunState({ id: 'r', status: 'running' });
  const f = follow(api, s, (st) => statuses.push(st.fallback), { win: win(), timing: T });
  t.after(() => f.stop());
  await new Promise((r) => setTimeout(r, 330));
  assert.ok(s.fallback, 'the state says updates are delayed');
  assert.equal(liveNote([s]), DELAYED_NOTE);
  assert.ok(polls.every((p) => p.wait <= 2), 'waits of at most 2 s');
  assert.ok(polls[1].at - polls[0].at >= T.busyIntervalMs - 5, `an answer with news: the next poll starts busyIntervalMs after it (${polls[1].at - polls[0].at} ms)`);
  for (let i = 2; i < polls.length; i++) assert.ok(polls[i].at - polls[i - 1].at >= T.emptyPauseMs - 5, `pause between empty answers (${polls[i].at - polls[i - 1].at} ms)`);
  const span = polls.at(-1).at - polls[1].at;
  assert.ok(polls.length >= 3 && polls.length - 2 <= span / (T.emptyPauseMs - 5), `${polls.length} polls in ${span} ms with a 60 ms pause`);
  streamUp = true;
  await f.done;
  assert.equal(s.text, 'ab');
  assert.equal(s.fallback, false, 'back on the stream');
  assert.equal(liveNote([s]), '');
  assert.ok(streamTries.length >= 2 && streamTries[1] - streamTries[0] >= T.streamRetryMs - 5, 'the stream is retried after streamRetryMs');
  assert.ok(statuses.includes(true) && statuses.at(-1) === false);
});

test('follow: offline is not "stream unavailable": no long-poll while the browser is offline', async () => {
  const w = win();
  w.navigator.onLine = false;
  let n = 0;
  const api = new ApiClient({ getToken: async () => 't', fetchImpl: async () => {
    n++;
    if (n === 1) throw new TypeError('Failed to fetch');
    return sse([frame(ev(1, 'run.completed')) + 'event: end\ndata: {"status":"completed"}\n\n']);
  } });
  api.events = () => assert.fail('no fallback while offline');
  const listeners = {};
  w.addEventListener = (k, fn) => { listeners[k] = fn; };
  w.removeEventListener = () => {};
  const s = newRunState({ id: 'r', status: 'running' });
  const f = follow(api, s, () => {}, { win: w, timing: { backoffMin: 10000 } });
  await new Promise((r) => setTimeout(r, 30));
  assert.equal(s.offline, true);
  assert.equal(liveNote([s]), '', 'offline has its own notice');
  w.navigator.onLine = true;
  listeners.online(); // wakes the back-off at once
  await f.done;
  assert.equal(s.status, 'completed');
});

test('follow: a silent connection (no heartbeat) is dropped and resumed', async () => {
  let n = 0;
  const api = new ApiClient({ getToken: async () => 't', fetchImpl: async (url, init) => {
    n++;
    if (n === 1) return sse([frame(ev(1, 'message.delta', { text: 'x' }))], { hold: true, signal: init.signal });
    assert.equal(init.headers['Last-Event-ID'], '1');
    return sse([frame(ev(2, 'run.completed')) + 'event: end\ndata: {"status":"completed"}\n\n']);
  } });
  const s = newRunState({ id: 'r', status: 'running' });
  await follow(api, s, () => {}, { win: win(), timing: { idleMs: 80 } }).done;
  assert.equal(n, 2);
  assert.equal(s.text, 'x');
});

test('feed: follows the stream, resumes from the last feed id, and a reset reads the lists again', async () => {
  const urls = [];
  let resets = 0;
  const got = [];
  const api = new ApiClient({ getToken: async () => 't', fetchImpl: async (url, init) => {
    urls.push([url, init.headers['Last-Event-ID'] ?? null]);
    if (urls.length === 1) return sse(['id: 5\nevent: reset\ndata: {"next":5}\n\nid: 6\ndata: {"type":"conversation.created","data":{"id":"c1"}}\n\n']);
    if (urls.length === 2) return sse(['id: 9\nevent: reset\ndata: {"next":9}\n\n'], { hold: true, signal: init.signal });
    return never(init);
  } });
  const w = watchFeed(api, { from: null, onEvents: async (evs) => got.push(...evs.map((e) => e.data.id)), onReset: async () => { resets++; }, win: win(), timing: { backoffMin: 1 } });
  await new Promise((r) => setTimeout(r, 50));
  w.stop();
  await w.done;
  assert.deepEqual(got, ['c1']);
  assert.equal(resets, 1, 'the first reset gives the position; a later one is a hole');
  assert.deepEqual(urls, [['/stream/feed', null], ['/stream/feed?after=6', '6']]);
  assert.equal(w.position(), 9);
});

test('live: stop ends a stream in flight', async () => {
  const api = new ApiClient({ getToken: async () => 't', fetchImpl: async (url, init) => sse([': hb\n\n'], { hold: true, signal: init.signal }) });
  const l = live(api, { path: () => '/stream/x', cursor: () => null, onMessages: () => false, onEnd: () => true, poll: () => assert.fail() }, { win: win() });
  await new Promise((r) => setTimeout(r, 20));
  l.stop();
  await l.done;
});

test('notice: shown while any follower falls back, not when offline, and cleared', () => {
  assert.equal(liveNote([null, { fallback: false }]), '');
  assert.equal(liveNote([{ fallback: false }, { fallback: true }]), DELAYED_NOTE);
  assert.equal(liveNote([{ fallback: true }, { offline: true }]), '');
  const el = { writes: 0, _t: '', get textContent() { return this._t; }, set textContent(v) { this.writes++; this._t = v; } };
  showNote(el, DELAYED_NOTE);
  showNote(el, DELAYED_NOTE);
  assert.equal(el.textContent, DELAYED_NOTE);
  assert.equal(el.writes, 1, 'an unchanged notice is not re-announced');
  showNote(el, '');
  assert.equal(el.textContent, '');
});

test('downloads come from the stream service, through the function only when it is unreachable', async () => {
  const urls = [];
  const api = new ApiClient({ getToken: async () => 't', fetchImpl: async (url) => {
    urls.push(url);
    if (url.startsWith('/stream/') && urls.length === 1) return new Response('abc', { status: 200 });
    if (url.startsWith('/stream/')) return new Response('', { status: 502 });
    return new Response('xyz', { status: 200 });
  } });
  assert.equal(await (await api.download({ id: 'f1', size: 3 })).text(), 'abc');
  assert.equal(await (await api.download({ id: 'f1', size: 3 })).text(), 'xyz');
  assert.deepEqual(urls, ['/stream/artifacts/f1/download', '/stream/artifacts/f1/download', '/api/artifacts/f1/download']);
  const missing = new ApiClient({ getToken: async () => 't', fetchImpl: async () => new Response(JSON.stringify({ error: { code: 'not_found', message: 'artifact not found' } }), { status: 404 }) });
  await assert.rejects(missing.download({ id: 'f2', size: 1 }), (e) => e.code === 'not_found');
});

test('follow: a connection that breaks mid-stream reconnects to the stream (no fallback), from the cursor', async () => {
  let n = 0;
  const api = new ApiClient({ getToken: async () => 't', fetchImpl: async (url, init) => {
    n++;
    if (n === 1) {
      let sent = false;
      const body = new ReadableStream({ pull(c) {
        if (!sent) { sent = true; c.enqueue(enc.encode(frame(ev(1, 'message.delta', { text: 'a' })))); return; }
        c.error(new TypeError('network error'));
      } });
      return new Response(body, { status: 200, headers: { 'Content-Type': 'text/event-stream' } });
    }
    assert.equal(init.headers['Last-Event-ID'], '1');
    return sse([frame(ev(2, 'message.delta', { text: 'b' })) + frame(ev(3, 'run.completed')) + 'event: end\ndata: {"status":"completed"}\n\n']);
  } });
  api.events = () => assert.fail('a broken stream is reopened, not replaced by the long-poll');
  const s = newRunState({ id: 'r', status: 'running' });
  const notes = [];
  await follow(api, s, (st) => notes.push(st.retryNote || ''), { win: win(), timing: { backoffMin: 1 } }).done;
  assert.equal(n, 2);
  assert.equal(s.text, 'ab');
  assert.ok(!s.fallback);
  assert.deepEqual(notes.filter(Boolean), [], 'a dropped connection is no failure to report');
});

test('feed with the system panel: "system" messages go to onSystem and never move the feed cursor', async () => {
  const urls = [];
  const got = [];
  const systems = [];
  const api = new ApiClient({ getToken: async () => 't', fetchImpl: async (url, init) => {
    urls.push([url, init.headers['Last-Event-ID'] ?? null]);
    if (urls.length === 1) {
      return sse(['id: 5\nevent: reset\ndata: {"next":5}\n\nevent: system\ndata: {"devices":[{"device":"arc","state":"idle"}]}\n\n',
        'id: 6\ndata: {"type":"conversation.created","data":{"id":"c1"}}\n\nevent: system\ndata: {"devices":[{"device":"arc","state":"busy"}]}\n\n']);
    }
    if (urls.length === 2) return sse([': hb\n\n'], { hold: true, signal: init.signal });
    return never(init);
  } });
  const w = watchFeed(api, { from: null, onEvents: async (evs) => got.push(...evs.map((e) => e.data.id)), onSystem: (s) => systems.push(s.devices[0].state), win: win(), timing: { backoffMin: 1 } });
  await new Promise((r) => setTimeout(r, 50));
  w.stop();
  await w.done;
  assert.deepEqual(got, ['c1']);
  assert.deepEqual(systems, ['idle', 'busy']);
  assert.deepEqual(urls, [['/stream/feed?system=1', null], ['/stream/feed?after=6&system=1', '6']], 'the cursor is the feed\'s, not a system message\'s');
  assert.equal(w.position(), 6);
});

test('a quiet run\'s record comes from the stream service, through the function only when it is unreachable', async () => {
  const urls = [];
  let down = false;
  const api = new ApiClient({ getToken: async () => 't', fetchImpl: async (url) => {
    urls.push(url);
    if (url.startsWith('/stream/') && down) return new Response('', { status: 502 });
    if (url === '/stream/runs/r2') return new Response(JSON.stringify({ error: { code: 'not_found', message: 'run not found' } }), { status: 404 });
    return new Response(JSON.stringify({ id: 'r1', heartbeatAt: 'x' }), { status: 200, headers: { 'Content-Type': 'application/json' } });
  } });
  assert.equal((await api.runRecord('r1')).id, 'r1');
  down = true;
  assert.equal((await api.runRecord('r1')).id, 'r1');
  down = false;
  await assert.rejects(api.runRecord('r2'), (e) => e.code === 'not_found', 'the service\'s own 404 is the answer');
  assert.deepEqual(urls, ['/stream/runs/r1', '/stream/runs/r1', '/api/runs/r1', '/stream/runs/r2']);
});
