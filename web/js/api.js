// Client for the Private Assistant API (the Appwrite Functions). Every call carries the
// user's short-lived Appwrite JWT as a Bearer header — never in a URL or in storage.

export class ApiError extends Error {
  constructor(status, code, message, retryAfter = 0, extra = {}) {
    super(message);
    this.status = status;
    this.code = code;
    this.retryAfter = retryAfter;
    this.extra = extra;
  }
}

/** NetworkError: the request never got an answer (offline, server unreachable, or no
 * answer within the client's time limit: a frozen server is reported, not waited on). */
export class NetworkError extends Error {
  constructor(message, { timeout = false } = {}) {
    super(message);
    this.timeout = timeout;
  }
}

/** How long a request may go unanswered before it counts as a network failure. */
export const REQUEST_TIMEOUT_MS = 12000;

/** A requestId that survives retries: 1–64 of [A-Za-z0-9._:-]. */
export function newRequestId() {
  const b = new Uint8Array(16);
  crypto.getRandomValues(b);
  return 'w' + Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

export class ApiClient {
  /**
   * @param {{base?: string, getToken: (force?: boolean, refused?: string) => Promise<string>, fetchImpl?: typeof fetch}} opts
   */
  constructor({ base = '', getToken, fetchImpl, timeoutMs = REQUEST_TIMEOUT_MS }) {
    this.base = base;
    this.getToken = getToken;
    this.fetch = fetchImpl || ((...a) => globalThis.fetch(...a));
    this.timeoutMs = timeoutMs;
    this.inflight = new Map(); // request → {started, expect}: what the connectivity watch reads
    this.seq = 0;
  }

  /** oldestOverdue: ms the most overdue request has waited beyond what it expects, or 0. */
  oldestOverdue(now = Date.now()) {
    let worst = 0;
    for (const r of this.inflight.values()) worst = Math.max(worst, now - r.started - r.expect);
    return worst;
  }

  async raw(method, path, { body, signal, headers = {}, timeout = this.timeoutMs, expect = 0 } = {}, refused = null) {
    const retried = refused !== null;
    // After a 401, a new token — unless another request already replaced the refused one.
    const token = await this.getToken(retried, refused);
    const h = { Authorization: 'Bearer ' + token, ...headers };
    if (body !== undefined) h['Content-Type'] = 'application/json';
    const timer = new AbortController();
    const t = setTimeout(() => timer.abort(), timeout);
    const onAbort = () => timer.abort();
    signal?.addEventListener('abort', onAbort);
    const id = ++this.seq;
    this.inflight.set(id, { started: Date.now(), expect });
    let res;
    try {
      res = await this.fetch(this.base + path, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body), signal: timer.signal });
    } catch (e) {
      if (signal?.aborted) throw e;
      if (timer.signal.aborted) throw new NetworkError('no answer from the server', { timeout: true });
      throw new NetworkError(e && e.message ? e.message : 'network error');
    } finally {
      clearTimeout(t);
      signal?.removeEventListener('abort', onAbort);
      this.inflight.delete(id);
    }
    if (res.status === 401 && !retried) {
      return this.raw(method, path, { body, signal, headers, timeout, expect }, token); // one refresh of the JWT
    }
    if (!res.ok) {
      let env = {};
      try { env = (await res.json()).error || {}; } catch { /* not our envelope */ }
      const { code = 'http_' + res.status, message = res.statusText || 'request failed', ...extra } = env;
      throw new ApiError(res.status, code, message, Number(res.headers.get('Retry-After') || 0), extra);
    }
    return res;
  }

  /**
   * openStream opens a text/event-stream of the stream service and returns the response once
   * its headers arrived (its body is read by the caller; `signal` ends it). `lastEventId`
   * resumes after that sequence. A 401 refreshes the JWT once, as raw does; a refusal is an
   * ApiError with the service's envelope (a 404 without one is code http_404: no route).
   */
  async openStream(path, { lastEventId = null, signal, timeout = this.timeoutMs } = {}, refused = null) {
    const retried = refused !== null;
    const token = await this.getToken(retried, refused);
    const h = { Authorization: 'Bearer ' + token, Accept: 'text/event-stream' };
    if (lastEventId !== null && lastEventId !== undefined && lastEventId !== '') h['Last-Event-ID'] = String(lastEventId);
    const ctrl = new AbortController();
    let timedOut = false;
    const t = setTimeout(() => { timedOut = true; ctrl.abort(); }, timeout);
    const onAbort = () => ctrl.abort();
    if (signal?.aborted) ctrl.abort(); else signal?.addEventListener('abort', onAbort);
    // Until its headers arrive, an opening stream is a request the connectivity watch reads.
    const id = ++this.seq;
    this.inflight.set(id, { started: Date.now(), expect: 0 });
    let res;
    try {
      res = await this.fetch(this.base + path, { method: 'GET', headers: h, signal: ctrl.signal, cache: 'no-store' });
    } catch (e) {
      signal?.removeEventListener('abort', onAbort);
      if (signal?.aborted) throw e;
      if (timedOut) throw new NetworkError('no answer from the server', { timeout: true });
      throw new NetworkError(e && e.message ? e.message : 'network error');
    } finally {
      clearTimeout(t);
      this.inflight.delete(id);
    }
    // From here the caller's signal ends the body (ctrl stays linked to it).
    if (res.status === 401 && !retried) {
      signal?.removeEventListener('abort', onAbort);
      res.body?.cancel().catch(() => {});
      return this.openStream(path, { lastEventId, signal, timeout }, token);
    }
    if (!res.ok || !(res.headers.get('Content-Type') || '').startsWith('text/event-stream')) {
      signal?.removeEventListener('abort', onAbort);
      let env = {};
      try { env = (await res.json()).error || {}; } catch { /* not our envelope */ }
      // A 200 that is no event stream did not come from the stream service (a fallback page).
      const status = res.ok ? 404 : res.status;
      const { code = 'http_' + status, message = res.statusText || 'request failed', ...extra } = env;
      throw new ApiError(status, code, message, Number(res.headers.get('Retry-After') || 0), extra);
    }
    return res;
  }

  async json(method, path, opts) {
    const res = await this.raw(method, path, opts);
    return res.json();
  }

  listConversations(cursor = '') { return this.json('GET', `/api/conversations?limit=30&cursor=${enc(cursor)}`); }
  createConversation(title, requestId) { return this.json('POST', '/api/conversations', { body: { title, requestId } }); }
  getConversation(id) { return this.json('GET', `/api/conversations/${enc(id)}`); }
  renameConversation(id, title) { return this.json('PATCH', `/api/conversations/${enc(id)}`, { body: { title } }); }
  async deleteConversation(id) { await this.raw('DELETE', `/api/conversations/${enc(id)}`); }
  /** The user's change feed after `after` (omitted: only the current position). */
  feed(after, wait, signal) {
    if (after === undefined || after === null) return this.json('GET', '/api/conversations/feed', { signal });
    return this.json('GET', `/api/conversations/feed?after=${after}&wait=${wait}`, { signal, timeout: wait * 1000 + 8000, expect: wait * 1000 });
  }
  listMessages(conv, cursor = '') { return this.json('GET', `/api/conversations/${enc(conv)}/messages?limit=100&cursor=${enc(cursor)}`); }
  sendMessage(conv, { requestId, text, role, attachments, parentId, retryOf }) {
    const body = { requestId, text, role };
    if (attachments?.length) body.attachments = attachments.map((a) => a.id);
    if (parentId) body.parentId = parentId; // branches (issue 34)
    if (retryOf) body.retryOf = retryOf;
    return this.json('POST', `/api/conversations/${enc(conv)}/messages`, { body });
  }
  searchMessages(q, cursor = '') { return this.json('GET', `/api/conversations/search?limit=20&q=${enc(q)}&cursor=${enc(cursor)}`); }
  listRuns(conv, cursor = '') { return this.json('GET', `/api/runs?limit=100&conversationId=${enc(conv)}&cursor=${enc(cursor)}`); }
  getRun(id) { return this.json('GET', `/api/runs/${enc(id)}`); }
  /** A run's record as getRun answers it, from the stream service (no function execution);
   * through the function only while the stream service is unreachable. */
  async runRecord(id) {
    try {
      return await this.json('GET', `/stream/runs/${enc(id)}`);
    } catch (e) {
      if (!noRoute(e) && !(e instanceof SyntaxError)) throw e; // SyntaxError: a page that is not the service's answer
      return this.getRun(id);
    }
  }
  events(runId, after, wait, signal) {
    // A long-poll may legitimately take `wait` seconds; beyond that (plus a margin) the
    // server is not answering.
    return this.json('GET', `/api/runs/${enc(runId)}/events?after=${after}&wait=${wait}`, { signal, timeout: wait * 1000 + 8000, expect: wait * 1000 });
  }
  cancel(runId) { return this.json('POST', `/api/runs/${enc(runId)}/cancel`, { body: {} }); }
  approve(runId, requestId, choice) { return this.json('POST', `/api/runs/${enc(runId)}/approval`, { body: { requestId, choice } }); }
  listArtifacts(filter) {
    const q = filter.runId ? `runId=${enc(filter.runId)}` : `conversationId=${enc(filter.conversationId)}`;
    return this.json('GET', `/api/artifacts?limit=100&${q}`);
  }
  system() { return this.json('GET', '/api/system'); }
  me() { return this.json('GET', '/api/me'); }
  roles() { return this.json('GET', '/api/roles'); }

  /** Redeems an invitation: makes the account. Public, so no Authorization header; the
   * token travels only in this POST body, never in a URL. */
  async redeem({ token, email, password, name }) {
    const ctrl = new AbortController();
    const t = setTimeout(() => ctrl.abort(), this.timeoutMs);
    let res;
    try {
      res = await this.fetch(this.base + '/api/invitations/redeem', { method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ token, email, password, name }), signal: ctrl.signal, cache: 'no-store', referrerPolicy: 'no-referrer' });
    } catch (e) {
      if (ctrl.signal.aborted) throw new NetworkError('no answer from the server', { timeout: true });
      throw new NetworkError(e && e.message ? e.message : 'network error');
    } finally {
      clearTimeout(t);
    }
    if (!res.ok) {
      let env = {};
      try { env = (await res.json()).error || {}; } catch { /* not our envelope */ }
      throw new ApiError(res.status, env.code || 'http_' + res.status, env.message || res.statusText || 'request failed');
    }
    return res.json();
  }

  /** health: true when the API answers its public health check within timeoutMs. */
  async health(timeoutMs = 3000) {
    const ctrl = new AbortController();
    const t = setTimeout(() => ctrl.abort(), timeoutMs);
    try {
      const res = await this.fetch(this.base + '/api/health', { signal: ctrl.signal, cache: 'no-store' });
      return res.ok;
    } catch {
      return false;
    } finally {
      clearTimeout(t);
    }
  }

  /**
   * Download an artifact's bytes in ranges (no token in any URL), as a Blob: from the stream
   * service, or through the function while the stream service is unreachable.
   */
  async download(artifact, chunk = 4 << 20) {
    try {
      return await this.downloadFrom('/stream', artifact, chunk);
    } catch (e) {
      if (!noRoute(e)) throw e;
      return this.downloadFrom('/api', artifact, chunk);
    }
  }

  async downloadFrom(prefix, artifact, chunk) {
    const parts = [];
    const size = artifact.size || 0;
    const path = `${prefix}/artifacts/${enc(artifact.id)}/download`;
    if (size <= chunk) {
      const res = await this.raw('GET', path);
      parts.push(await res.arrayBuffer());
    } else {
      for (let off = 0; off < size; off += chunk) {
        const end = Math.min(off + chunk, size) - 1;
        const res = await this.raw('GET', path, { headers: { Range: `bytes=${off}-${end}` } });
        if (res.status !== 206) throw new ApiError(res.status, 'range_unsupported', 'the server did not answer the range');
        parts.push(await res.arrayBuffer());
      }
    }
    return new Blob(parts, { type: 'application/octet-stream' });
  }
}

function enc(s) { return encodeURIComponent(s || ''); }

/** noRoute: the stream service did not answer as itself (no answer, a proxy's 502/503/504,
 * a 404 without its envelope). */
function noRoute(e) {
  return e instanceof NetworkError || (e instanceof ApiError && ([502, 503, 504].includes(e.status) || (e.status === 404 && e.code === 'http_404')));
}
