// Follows a run's events through the long-poll: resumes from the last sequence it saw,
// keeps going through network loss (with back-off) and wakes up at once when the browser
// comes back online or the page becomes visible again (a phone waking up).
import { ApiError } from './api.js';

export const TERMINAL = new Set(['completed', 'failed', 'cancelled', 'interrupted']);

/**
 * Applies events to a run's view state, enforcing order: an event is applied only if its
 * sequence is exactly one past the last applied one (duplicates and gaps are dropped).
 */
export function applyEvents(state, events) {
  const applied = [];
  for (const ev of events) {
    if (ev.sequence !== state.seq + 1) continue;
    state.seq = ev.sequence;
    const d = ev.data || {};
    switch (ev.type) {
      case 'message.delta': state.text += d.text || ''; break;
      case 'message.reset': state.text = ''; break;
      case 'run.status': state.status = d.status || state.status; state.phase = d.phase || state.phase;
        state.queueReason = d.queueReason ?? null; state.queuePosition = d.queuePosition ?? null; break;
      case 'tool.started': state.tools.push({ tool: d.tool, preview: d.preview, done: false }); break;
      case 'tool.completed': { const t = [...state.tools].reverse().find((x) => x.tool === d.tool && !x.done); if (t) { t.done = true; t.error = !!d.error; } break; }
      case 'approval.request': state.approval = { requestId: d.requestId, command: d.command, description: d.description, choices: d.choices || ['once', 'deny'] }; state.status = 'waiting_for_approval'; break;
      case 'approval.responded': state.approval = null; state.status = 'running'; break;
      case 'artifact.created': state.artifacts.push({ id: d.artifactId, filename: d.filename, size: d.size, mimeType: d.mimeType }); break;
      case 'run.completed': case 'run.failed': case 'run.cancelled': case 'run.interrupted':
        state.status = ev.type.slice(4); state.error = d.error || null; state.messageId = d.messageId || null; break;
    }
    applied.push(ev);
  }
  return applied;
}

export function newRunState(run) {
  return { id: run.id, seq: 0, text: '', status: run.status, phase: run.phase, queueReason: run.queueReason,
    queuePosition: run.queuePosition, tools: [], approval: null, artifacts: [], error: run.error || null,
    cancelling: !!run.cancelRequested && !TERMINAL.has(run.status), startedAt: run.startedAt, heartbeatAt: run.heartbeatAt };
}

/**
 * follow(api, state, onChange) long-polls until the run is terminal or stop() is called.
 * Rendering is batched: onChange runs at most once per animation frame.
 */
export function follow(api, state, onChange, { wait = 20, win = globalThis } = {}) {
  let stopped = false;
  let ctrl = null;
  let backoff = 500;
  let scheduled = false;
  const render = () => {
    if (scheduled) return;
    scheduled = true;
    (win.requestAnimationFrame || ((f) => setTimeout(f, 16)))(() => { scheduled = false; onChange(state); });
  };
  let wake = null;
  const sleep = (ms) => new Promise((r) => { const t = setTimeout(r, ms); wake = () => { clearTimeout(t); r(); }; });
  const poke = () => { if (wake) wake(); };
  win.addEventListener?.('online', poke);
  win.document?.addEventListener?.('visibilitychange', poke);
  const loop = async () => {
    while (!stopped) {
      ctrl = new AbortController();
      try {
        const b = await api.events(state.id, state.seq, wait, ctrl.signal);
        backoff = 500;
        state.offline = false;
        if (b.status) state.status = b.status;
        if (applyEvents(state, b.events).length || b.terminal) render();
        if (b.terminal) { state.status = b.status; render(); break; }
      } catch (e) {
        if (stopped) break;
        if (e instanceof ApiError && e.status === 404) { state.status = 'failed'; state.error = 'run not found'; render(); break; }
        if (e instanceof ApiError && e.status === 401) { state.authExpired = true; render(); await sleep(2000); continue; }
        state.offline = !(e instanceof ApiError);
        render();
        await sleep(e instanceof ApiError && e.retryAfter ? e.retryAfter * 1000 : backoff);
        backoff = Math.min(backoff * 2, 15000);
      }
    }
    win.removeEventListener?.('online', poke);
    win.document?.removeEventListener?.('visibilitychange', poke);
  };
  const done = loop();
  return { stop() { stopped = true; poke(); ctrl?.abort(); }, done };
}
