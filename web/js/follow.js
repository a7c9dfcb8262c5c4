// Follows a run's events over the stream service (SSE; the function long-poll only while
// the stream service is unreachable): resumes from the last sequence it applied, keeps
// going through network loss (with back-off) and wakes up at once when the browser comes
// back online or the page becomes visible again (a phone waking up).
import { ApiError } from './api.js';
import { live } from './sse.js';

export const TERMINAL = new Set(['completed', 'failed', 'cancelled', 'interrupted']);

/**
 * Applies events to a run's view state, enforcing order: an event is applied only if its
 * sequence is exactly one past the last applied one (duplicates and gaps are dropped).
 */
export function applyEvents(state, events, now = Date.now()) {
  const applied = [];
  for (const ev of events) {
    if (ev.sequence !== state.seq + 1) continue;
    state.seq = ev.sequence;
    state.lastSignAt = now;
    const d = ev.data || {};
    switch (ev.type) {
      case 'message.delta': {
        const t = d.text || '';
        // A new model turn after a tool call or an approval starts a new paragraph:
        // "Let me check that." and "The listing is done." never run together.
        if (t && state.turnBreak && state.text && !/\n\s*$/.test(state.text)) state.text += '\n\n';
        if (t) state.turnBreak = false;
        state.text += t;
        // The phase says what happens: text arriving is the answer being written (the
        // last run.status may still say "thinking").
        if (t && !TERMINAL.has(state.status) && state.status !== 'waiting_for_approval') state.phase = 'writing';
        break;
      }
      case 'message.reset': state.text = ''; state.turnBreak = false; break;
      case 'run.status':
        if (!TERMINAL.has(state.status)) state.status = d.status || state.status;
        state.phase = d.phase || state.phase;
        state.queueReason = d.queueReason ?? null; state.queuePosition = d.queuePosition ?? null;
        if (d.progress !== undefined) state.progress = d.progress; // real counts only (view.progressWords)
        break;
      case 'tool.started':
        state.tools.push({ tool: d.tool, preview: d.preview, done: false }); state.turnBreak = true;
        if (!TERMINAL.has(state.status)) state.phase = `running tool: ${d.tool}`;
        break;
      case 'tool.completed': {
        const t = [...state.tools].reverse().find((x) => x.tool === d.tool && !x.done);
        if (t) { t.done = true; t.error = !!d.error; }
        if (!TERMINAL.has(state.status)) state.phase = 'thinking';
        state.turnBreak = true; break;
      }
      case 'approval.request':
        state.approval = { requestId: d.requestId, command: d.command, description: d.description, choices: d.choices || ['once', 'deny'] };
        if (!TERMINAL.has(state.status)) state.status = 'waiting_for_approval';
        state.turnBreak = true; break;
      case 'approval.responded': {
        const a = state.approval && (!d.requestId || state.approval.requestId === d.requestId) ? state.approval : null;
        if (!state.decisions.some((x) => x.requestId === d.requestId)) {
          // A reason means nobody decided (the approval expired and the harness denied the
          // command): never worded as the person's own denial.
          const dec = { requestId: d.requestId, choice: d.choice, command: a?.command || '' };
          if (d.reason) Object.assign(dec, { reason: d.reason, at: ev.at || '' });
          state.decisions.push(dec);
        }
        state.approval = null;
        if (!TERMINAL.has(state.status)) state.status = 'running';
        state.turnBreak = true; break;
      }
      case 'artifact.created': state.artifacts.push({ id: d.artifactId, filename: d.filename, size: d.size, mimeType: d.mimeType }); break;
      case 'run.completed': case 'run.failed': case 'run.cancelled': case 'run.interrupted':
        state.status = ev.type.slice(4); state.error = d.error || null; state.messageId = d.messageId || null;
        // Files the run wrote that were not kept, and its writes that failed (a completed run
        // whose write was refused must not read as all well).
        state.notSaved = (d.skippedArtifacts || []).map((x) => ({ name: x.Name || '', reason: x.Reason || '' }));
        // Tokens come with the event; the model served only on the record (main.js reads it).
        if (d.usage) state.usage = { ...d.usage, model: state.usage?.model ?? null };
        // A settled run asks nothing any more.
        state.approval = null; state.cancelling = false; break;
    }
    applied.push(ev);
  }
  return applied;
}

/** denied reports whether the person denied a command in this run. */
export function denied(state) { return state.decisions.some((x) => x.choice === 'deny' && !x.reason); }

/** expired reports whether an approval of this run expired before anyone answered. */
export function expired(state) { return state.decisions.some((x) => x.reason); }

export function newRunState(run) {
  return { id: run.id, role: run.role || 'chat', seq: 0, text: '', turnBreak: false, status: run.status, phase: run.phase,
    queueReason: run.queueReason, queuePosition: run.queuePosition, tools: [], approval: null, decisions: [], artifacts: [], notSaved: [],
    error: run.error || null, cancelling: !!run.cancelRequested && !TERMINAL.has(run.status), startedAt: run.startedAt, queuedAt: run.queuedAt,
    heartbeatAt: run.heartbeatAt, progress: run.progress || null, usage: run.usage || null, lastSignAt: Date.now(), done: false };
}

/**
 * follow(api, state, onChange) follows the run until it is terminal or stop() is called:
 * over the stream service (SSE, resumed from state.seq on every reconnect), over the
 * function long-poll only while the stream service is unreachable (sse.js live). Rendering
 * is batched: onChange runs at most once per animation frame. state.fallback says that
 * updates come through the slower fallback.
 */
export function follow(api, state, onChange, { win = globalThis, timing = {} } = {}) {
  let scheduled = false;
  const render = () => {
    if (scheduled) return;
    scheduled = true;
    (win.requestAnimationFrame || ((f) => setTimeout(f, 16)))(() => { scheduled = false; onChange(state); });
  };
  const settle = (status) => {
    state.status = status || state.status;
    state.approval = null;
    state.cancelling = false;
    state.done = true;
    render();
    return true;
  };
  const spec = {
    path: () => `/stream/runs/${encodeURIComponent(state.id)}/events?after=${state.seq}`,
    cursor: () => state.seq,
    onMessages(msgs) {
      const evs = [];
      for (const m of msgs) {
        try { evs.push(JSON.parse(m.data)); } catch { /* not an event: skipped (the next ones wait for it) */ }
      }
      if (applyEvents(state, evs).length) render();
      return false;
    },
    onEnd(m) {
      let status = '';
      try { status = JSON.parse(m.data).status; } catch { /* the events said it */ }
      return settle(TERMINAL.has(status) ? status : state.status);
    },
    async poll(wait, signal) {
      const b = await api.events(state.id, state.seq, wait, signal);
      if (b.status && !TERMINAL.has(state.status)) state.status = b.status;
      const n = applyEvents(state, b.events).length;
      if (n) render();
      if (b.terminal) return { done: settle(b.status), count: n };
      return { done: false, count: n };
    },
    onError(e) {
      if (e instanceof ApiError && e.status === 404) {
        state.status = 'failed'; state.error = 'run not found'; state.approval = null; state.done = true; render();
        return true;
      }
      return false;
    },
    onStatus(st) {
      state.offline = st.offline;
      state.retryNote = st.note;
      state.fallback = st.fallback;
      if (st.authExpired) state.authExpired = true;
      render();
    },
  };
  const l = live(api, spec, { win, timing });
  return { stop: l.stop, done: l.done };
}
