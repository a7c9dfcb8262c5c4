// A scripted /api for states the demo stack cannot produce on demand (Redis down, a frozen
// server, a run stuck cancelling, a failed run, Markdown with code and tables). Sign-in
// stays real (the Appwrite emulator); only /api/* is answered here, in the wire format of
// functions/service.

const json = (route, status, body, headers = {}) => route.fulfill({ status, contentType: 'application/json', headers, body: JSON.stringify(body) });

export function run(id, over = {}) {
  return { id, conversationId: 'c1', messageId: 'm-' + id, requestId: 'q-' + id, role: 'chat', status: 'completed', terminal: true,
    phase: null, progress: null, queueReason: null, queuePosition: null, cancelRequested: false,
    queuedAt: new Date(Date.now() - 90000).toISOString(), startedAt: new Date(Date.now() - 80000).toISOString(), finishedAt: null, heartbeatAt: null, elapsedMs: null,
    lastSequence: 0, assistantMessageId: null, error: null, usage: null, ...over };
}

const ROLES = [{ name: 'chat', tools: [] }, { name: 'coding', tools: ['shell'] }, { name: 'research', tools: ['web'] }];

export const ev = (type, data = {}) => ({ type, data, at: '2026-01-01T10:00:02Z' });
/** events numbers a list of events from 1. */
export function events(...list) { return list.map((e, i) => ({ ...e, sequence: i + 1 })); }

/**
 * fakeApi answers /api/* from a fixture:
 *   { conversations: [...], messages: {convId: [...]}, runs: {convId: [...]}, events: {runId: [...]},
 *     system: {...} | (() => {...}), hang: () => bool, onSend: (body) => response }
 * Events are served as one batch (terminal when the run is), by the long-poll and by the
 * stream service's SSE alike; the system panel by /api/system and on the feed (system=1).
 */
export async function fakeApi(page, fx) {
  const handler = async (route) => {
    const req = route.request();
    const url = new URL(req.url());
    const p = url.pathname;
    if (fx.hang && fx.hang(p)) return; // never answered: a frozen server
    let m;
    // The stream service, as SSE: each response ends after what there is (a quiet one after
    // 2 s, like a heartbeat), and the page reconnects from its cursor.
    const sse = (body) => route.fulfill({ status: 200, contentType: 'text/event-stream', body });
    const cursor = () => Number(req.headers()['last-event-id'] ?? url.searchParams.get('after') ?? 0);
    if (p === '/stream/feed') {
      // With system=1 every answer carries the system panel's state (as the service sends it
      // at once and on each change).
      const system = () => (url.searchParams.get('system') === '1'
        ? `event: system\ndata: ${JSON.stringify(typeof fx.system === 'function' ? fx.system() : fx.system || { devices: [], queues: [], staleAfterMs: 30000 })}\n\n` : '');
      if (req.headers()['last-event-id'] === undefined && !url.searchParams.has('after')) return sse('id: 0\nevent: reset\ndata: {"next":0}\n\n' + system());
      await new Promise((res) => setTimeout(res, 2000));
      return sse(system() || ': hb\n\n');
    }
    if ((m = /^\/stream\/runs\/([^/]+)\/events$/.exec(p))) {
      const all = (fx.events || {})[m[1]] || [];
      const r = Object.values(fx.runs || {}).flat().find((x) => x.id === m[1]);
      const evs = all.filter((e) => e.sequence > cursor());
      if (!evs.length && !r?.terminal) await new Promise((res) => setTimeout(res, 2000));
      let body = evs.map((e) => `id: ${e.sequence}\ndata: ${JSON.stringify(e)}\n\n`).join('') || ': hb\n\n';
      if (r?.terminal) body += `event: end\ndata: ${JSON.stringify({ status: r.status })}\n\n`;
      return sse(body);
    }
    if (p === '/api/invitations/redeem') return route.continue(); // accounts are real
    if (p === '/api/health') return json(route, 200, { ok: true });
    if (p === '/api/me') return json(route, 200, { id: 'u1', email: 'fake@example.com', name: 'Tester', member: fx.member ?? true, admin: false, roles: fx.roles || ROLES });
    if (p === '/api/roles') return json(route, 200, { roles: fx.roles || ROLES });
    if (p === '/api/system') return json(route, 200, typeof fx.system === 'function' ? fx.system() : fx.system || { devices: [], queues: [], staleAfterMs: 30000 });
    if (p === '/api/conversations/feed') {
      // The change feed: nothing changes in a fixture (a poll is held a little, like the server's).
      const after = url.searchParams.get('after');
      if (after !== null) await new Promise((res) => setTimeout(res, 1000));
      return json(route, 200, { events: [], next: Number(after || 0), reset: false });
    }
    if (p === '/api/conversations' && req.method() === 'GET') return json(route, 200, { conversations: fx.conversations || [], next: '' });
    if ((m = /^\/api\/conversations\/([^/]+)\/messages$/.exec(p)) && req.method() === 'GET') return json(route, 200, { messages: (fx.messages || {})[m[1]] || [], next: '' });
    if (p === '/api/runs') return json(route, 200, { runs: (fx.runs || {})[url.searchParams.get('conversationId')] || [], next: '' });
    if ((m = /^\/api\/runs\/([^/]+)\/events$/.exec(p))) {
      const all = (fx.events || {})[m[1]] || [];
      const after = Number(url.searchParams.get('after') || 0);
      const r = Object.values(fx.runs || {}).flat().find((x) => x.id === m[1]);
      const evs = all.filter((e) => e.sequence > after);
      if (!evs.length && r && !r.terminal) {
        // A live run with nothing new: hold the poll a little, like the server does.
        await new Promise((res) => setTimeout(res, 1000));
      }
      return json(route, 200, { events: evs, next: all.length, status: r?.status || 'running', terminal: !!r?.terminal });
    }
    if ((m = /^\/(?:api|stream)\/runs\/([^/]+)$/.exec(p))) {
      const r = Object.values(fx.runs || {}).flat().find((x) => x.id === m[1]);
      return r ? json(route, 200, r) : json(route, 404, { error: { code: 'not_found', message: 'run not found' } });
    }
    if (fx.onRequest) { const handled = await fx.onRequest(route, req, p); if (handled) return; }
    return json(route, 404, { error: { code: 'not_found', message: 'not in the fixture' } });
  };
  await page.route('**/api/**', handler);
  await page.route('**/stream/**', handler);
}
