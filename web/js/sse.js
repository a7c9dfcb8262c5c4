// Live updates over the stream service (/stream/…): Server-Sent Events read from an
// authenticated fetch (EventSource cannot send the Authorization header). live() keeps one
// subscription going: over the stream while it answers, resuming from the last applied
// sequence on every reconnect; over the function long-poll only while the stream service
// is unreachable (short waits, a pause between empty answers, the stream tried again every
// ~10 s), and it says which, so the page can show that updates are delayed.
import { ApiError, NetworkError } from './api.js';

/**
 * SSEParser turns text/event-stream text, in chunks cut anywhere, into messages
 * {id, event, data} (the HTML standard's parsing: lines end in CRLF, LF or CR; "data"
 * lines join with "\n"; ":" starts a comment; a blank line ends a message; a message
 * without data is not dispatched). `lastEventId` is the id in force, as EventSource keeps it.
 */
export class SSEParser {
  constructor() {
    this.buf = '';
    this.skipLF = false; // the previous chunk ended in CR: a leading LF belongs to it
    this.data = null;
    this.event = '';
    this.lastEventId = '';
    this.comments = 0;
    this.first = true;
  }

  /** feed parses a chunk and returns the messages it completed. */
  feed(chunk) {
    let s = chunk;
    if (this.first && s.length) { if (s.charCodeAt(0) === 0xfeff) s = s.slice(1); this.first = false; }
    if (this.skipLF && s.startsWith('\n')) s = s.slice(1);
    this.skipLF = false;
    const out = [];
    const text = this.buf + s;
    let i = 0;
    for (;;) {
      let j = i;
      while (j < text.length && text[j] !== '\n' && text[j] !== '\r') j++;
      if (j >= text.length) break;
      const line = text.slice(i, j);
      if (text[j] === '\r') {
        if (j + 1 < text.length) { i = text[j + 1] === '\n' ? j + 2 : j + 1; } else { i = j + 1; this.skipLF = true; }
      } else i = j + 1;
      this.line(line, out);
    }
    this.buf = text.slice(i);
    return out;
  }

  line(line, out) {
    if (line === '') {
      if (this.data !== null) out.push({ id: this.lastEventId, event: this.event || 'message', data: this.data });
      this.data = null;
      this.event = '';
      return;
    }
    if (line[0] === ':') { this.comments++; return; }
    const c = line.indexOf(':');
    const field = c < 0 ? line : line.slice(0, c);
    let value = c < 0 ? '' : line.slice(c + 1);
    if (value[0] === ' ') value = value.slice(1);
    switch (field) {
      case 'data': this.data = this.data === null ? value : this.data + '\n' + value; break;
      case 'event': this.event = value; break;
      case 'id': if (!value.includes('\0')) this.lastEventId = value; break;
      default: break; // retry and unknown fields: ignored
    }
  }
}

/**
 * readSSE reads a response body to its end, calling onMessages with the messages of each
 * chunk (awaited: the next chunk is read after). onBytes is called whenever bytes arrive
 * (a heartbeat comment included). It stops early when onMessages returns true.
 */
export async function readSSE(body, onMessages, { onBytes = () => {} } = {}) {
  const reader = body.getReader();
  const dec = new TextDecoder();
  const p = new SSEParser();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      onBytes();
      const msgs = p.feed(dec.decode(value, { stream: true }));
      if (msgs.length && await onMessages(msgs)) return true;
    }
    const tail = p.feed(dec.decode());
    if (tail.length && await onMessages(tail)) return true;
    return false;
  } finally {
    reader.cancel().catch(() => {});
  }
}

/** StreamError: the stream service reported a failure after the stream began (event: error). */
export class StreamError extends Error {
  constructor(env = {}) {
    super(env.message || 'live events failed');
    this.code = env.code || 'stream_error';
  }
}

/**
 * unreachable: the stream service did not answer as itself — no answer at all, a proxy's
 * 502/503/504, or a 404 that is not the service's own envelope (no route to /stream/).
 */
export function unreachable(e) {
  if (e instanceof NetworkError) return true;
  if (!(e instanceof ApiError)) return false;
  if ([502, 503, 504].includes(e.status)) return true;
  return e.status === 404 && e.code === 'http_404';
}

export const TIMING = {
  pollWait: 2,           // s: the fallback long-poll's wait (the functions cap theirs at 2 s too)
  emptyPauseMs: 1500,    // between fallback answers without news: an instant answer never spins
  busyIntervalMs: 2000,  // a fallback poll with news: the next one starts this long after it
  streamRetryMs: 10000,  // while falling back, the stream is tried again this often
  idleMs: 40000,         // no byte (heartbeats every 15 s) this long: the connection is dead
  staleMs: 20000,        // coming back into view after this long without a byte: reconnect
  backoffMin: 500,
  backoffMax: 15000,
};

/**
 * live(api, spec, opts) follows one source until spec says it is finished or stop().
 *   spec.path(): the /stream/… path for the current cursor (?after= included)
 *   spec.cursor(): the last applied sequence (Last-Event-ID on a reconnect), or null
 *   spec.onMessages(msgs): applies data messages (event "message", and "reset"); true ends
 *   spec.onEnd(msg): the stream's "end" message; true ends
 *   spec.poll(wait, signal): one fallback long-poll round → {done, count}
 *   spec.onError(e): true when e settles the subscription (e.g. the run is gone)
 *   spec.onStatus(st): {fallback, offline, note, authExpired} whenever it changes
 * Returns {stop(), done, status()}.
 */
export function live(api, spec, { win = globalThis, timing = {} } = {}) {
  const T = { ...TIMING, ...timing };
  let stopped = false;
  let ctrl = null;
  let wake = null;
  let lastByte = 0;
  let streaming = false;
  let fallback = false;
  let nextStreamTry = 0;
  let backoff = T.backoffMin;
  const st = { fallback: false, offline: false, note: '', authExpired: false };
  const set = (patch) => {
    let changed = false;
    for (const [k, v] of Object.entries(patch)) if (st[k] !== v) { st[k] = v; changed = true; }
    if (changed) spec.onStatus?.({ ...st });
  };
  const sleep = (ms) => new Promise((r) => {
    const t = setTimeout(() => { wake = null; r(); }, ms);
    wake = () => { wake = null; clearTimeout(t); r(); };
  });
  const poke = () => { if (wake) wake(); };
  const online = () => win.navigator?.onLine !== false;
  const onOnline = () => poke();
  // Offline: a stream may hang rather than fail; drop it now, reconnect when back.
  const onOffline = () => { if (streaming) ctrl?.abort(); };
  const onVisible = () => {
    if (win.document?.visibilityState === 'hidden') return;
    if (streaming && Date.now() - lastByte > T.staleMs) ctrl?.abort(); // a phone waking up
    poke();
  };
  win.addEventListener?.('online', onOnline);
  win.addEventListener?.('offline', onOffline);
  win.document?.addEventListener?.('visibilitychange', onVisible);

  const failed = async (e) => {
    if (e instanceof ApiError && e.status === 401) { set({ authExpired: true }); await sleep(2000); return; }
    const off = e instanceof NetworkError || (e?.name === 'AbortError');
    set({ offline: off, note: off ? '' : 'live updates paused; retrying' });
    await sleep(e instanceof ApiError && e.retryAfter ? e.retryAfter * 1000 : backoff);
    backoff = Math.min(backoff * 2, T.backoffMax);
  };

  const viaStream = async () => {
    ctrl = new AbortController();
    const c = ctrl;
    let got = 0;
    let watch = null;
    try {
      const res = await api.openStream(spec.path(), { lastEventId: spec.cursor(), signal: c.signal });
      const opened = Date.now();
      streaming = true;
      lastByte = Date.now();
      fallback = false;
      set({ fallback: false, offline: false, note: '', authExpired: false });
      watch = setInterval(() => { if (Date.now() - lastByte > T.idleMs) c.abort(); }, Math.min(T.idleMs, 5000));
      let finished = false;
      try {
        finished = await readSSE(res.body, async (msgs) => {
          const data = [];
          for (const m of msgs) {
            if (m.event === 'error') {
              let env = {};
              try { env = JSON.parse(m.data).error || {}; } catch { /* not an envelope */ }
              throw new StreamError(env);
            }
            if (m.event === 'end') {
              if (data.length && await spec.onMessages(data)) return true;
              data.length = 0;
              return !!(await spec.onEnd(m));
            }
            data.push(m);
          }
          got += data.length;
          return data.length ? !!(await spec.onMessages(data)) : false;
        }, { onBytes: () => { lastByte = Date.now(); } });
      } catch (e) {
        // The connection broke mid-stream (a restart, a lost network): reconnect to the
        // stream as after a close; only an unanswered open falls back to the long-poll.
        if (stopped || e instanceof StreamError || e?.name === 'AbortError' || c.signal.aborted) throw e;
        set({ offline: !online() });
      }
      if (finished) return true;
      // The server closed without "end" (a restart, a proxy timeout): reconnect.
      if (got || Date.now() - opened >= 1000) backoff = T.backoffMin; // only an instant close backs off
      await sleep(backoff);
      backoff = Math.min(backoff * 2, T.backoffMax);
      return false;
    } catch (e) {
      if (stopped) return true;
      if (e?.name === 'AbortError' || c.signal.aborted) {
        // Dropped by the idle watch, going offline or waking up: reconnect (at once if online).
        set({ offline: !online() });
        if (!online()) await sleep(T.backoffMax);
        return false;
      }
      if (e instanceof StreamError) { await failed(new ApiError(503, e.code, e.message)); return false; }
      if (unreachable(e) && !(e instanceof NetworkError && !online())) {
        fallback = true;
        nextStreamTry = Date.now() + T.streamRetryMs;
        return false;
      }
      if (await spec.onError?.(e)) return true;
      await failed(e);
      return false;
    } finally {
      streaming = false;
      clearInterval(watch);
    }
  };

  const viaPoll = async () => {
    ctrl = new AbortController();
    const asked = Date.now();
    try {
      const r = await spec.poll(T.pollWait, ctrl.signal);
      backoff = T.backoffMin;
      set({ fallback: true, offline: false, note: '', authExpired: false });
      if (r.done) return true;
      // However fast the answer came (the function answers at once when another poll of its
      // container is waiting), the next one waits: never a spin of executions; with news, at
      // most one poll per busyIntervalMs (each holds one of Appwrite's few workers).
      await sleep(r.count ? Math.max(0, T.busyIntervalMs - (Date.now() - asked)) : T.emptyPauseMs);
      return false;
    } catch (e) {
      if (stopped) return true;
      if (await spec.onError?.(e)) return true;
      await failed(e);
      return false;
    }
  };

  const loop = async () => {
    while (!stopped) {
      const useStream = !fallback || Date.now() >= nextStreamTry;
      if (await (useStream ? viaStream() : viaPoll())) break;
    }
    win.removeEventListener?.('online', onOnline);
    win.removeEventListener?.('offline', onOffline);
    win.document?.removeEventListener?.('visibilitychange', onVisible);
  };
  const done = loop();
  return { stop() { stopped = true; poke(); ctrl?.abort(); }, done, status: () => ({ ...st }) };
}

export const DELAYED_NOTE = 'Live updates are delayed (stream unavailable); retrying…';

/**
 * liveNote: the page's notice for the followers' statuses: said while any of them falls
 * back to the long-poll and none is offline (being offline has its own notice).
 */
export function liveNote(statuses) {
  const all = [...statuses].filter(Boolean);
  if (all.some((s) => s.offline)) return '';
  return all.some((s) => s.fallback) ? DELAYED_NOTE : '';
}

/** showNote writes the notice into its live region (role=status, empty when there is none). */
export function showNote(el, text) {
  if (el && el.textContent !== text) el.textContent = text;
}
