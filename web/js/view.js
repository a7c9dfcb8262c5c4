// Pure view logic of the chat (no DOM): what a run card says and whether it is shown,
// and a conversation's title from its first message. Unit-tested under node.
import { TERMINAL, denied, expired } from './follow.js';

/** A title from the first message: its first line, at most 60 characters, cut at a word. */
export function titleFrom(text) {
  const line = text.split('\n').map((l) => l.trim()).find(Boolean) || 'New conversation';
  const s = line.replace(/\s+/g, ' ');
  if (s.length <= 60) return s;
  const cut = s.slice(0, 60);
  const sp = cut.lastIndexOf(' ');
  return (sp > 30 ? cut.slice(0, sp) : cut) + '…';
}

const STATUS_WORDS = { queued: 'queued', running: 'working', waiting_for_approval: 'needs your approval',
  waiting_for_resource: 'waiting for the GPU', completed: 'done',
  failed: 'failed', cancelled: 'cancelled', interrupted: 'interrupted' };

const WAITING = new Set(['queued', 'waiting_for_resource', 'waiting_for_approval']);

const norm = (x) => String(x || '').toLowerCase().replace(/[_….]/g, ' ').replace(/\s+/g, ' ').trim();

/** since words how long ago a run started: "12 s", "4 min", "2 h 5 min", "3 days". */
export function since(ts, now = Date.now()) {
  if (!ts) return '';
  const s = Math.max(0, Math.round((now - Date.parse(ts)) / 1000));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 48 * 3600) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} days`;
}

/** statusLine: the card's words, each said once. */
export function statusLine(s, now = Date.now()) {
  const terminal = TERMINAL.has(s.status);
  let label = s.cancelling && !terminal ? 'cancelling…' : STATUS_WORDS[s.status] || norm(s.status);
  let cls = s.status;
  if (s.status === 'completed' && denied(s)) { label = 'done · you denied a command'; cls += ' denied'; }
  else if (s.status === 'completed' && expired(s)) { label = 'done · an approval expired'; cls += ' expired'; }
  const parts = [];
  const said = new Set([norm(label), norm(s.status)]);
  const add = (x) => { const k = norm(x); if (!k || said.has(k)) return; said.add(k); parts.push(x); };
  if (!terminal && !s.cancelling) {
    if (s.phase && !['starting', 'completed', 'cancelled', 'failed', 'running'].includes(norm(s.phase))) add(s.phase);
    // Why it waits, in every waiting state (queued, waiting for the GPU, paused for a swap).
    if (s.queueReason) add(s.queueReason + (s.queuePosition ? ` (position ${s.queuePosition})` : ''));
    else if (s.queuePosition) add(`position ${s.queuePosition}`);
    const pr = progressWords(s.progress);
    if (pr) add(pr);
    if (s.startedAt && s.role !== 'chat') add(since(s.startedAt, now));
    // A job not started yet says how long it has waited (every waiting state has its time).
    else if (!s.startedAt && s.queuedAt && WAITING.has(s.status)) add(`waiting ${since(s.queuedAt, now)}`);
    // Silence is reported only when there is silence: no event and no heartbeat for 30 s.
    const quiet = Math.round((now - s.lastSignAt) / 1000);
    if (s.status === 'running' && quiet >= 30) add(`no news from the worker for ${quiet >= 120 ? Math.round(quiet / 60) + ' min' : quiet + ' s'}`);
  }
  if (terminal) add(usageWords(s.usage));
  if (s.offline) add('offline; will resume');
  else if (s.retryNote) add(s.retryNote);
  return { label, cls, detail: parts.join(' · ') };
}

/** needsCard: cards are for work that needs one (waiting, approvals, failures, jobs). */
export function needsCard(s, sinceMs = 0) {
  if (s.approval || s.decisions.length || s.tools.length || s.artifacts.length || s.cancelling || s.offline) return true;
  if (['failed', 'cancelled', 'interrupted', 'queued', 'waiting_for_approval', 'waiting_for_resource'].includes(s.status)) return true;
  if (s.queueReason) return true;
  if (s.role !== 'chat') return true;
  if (s.status === 'running' && !s.text && sinceMs > 1500) return true;
  return false;
}


/** clock words a timestamp as the local time of day ("14:05"), with the date when not today. */
export function clock(ts, now = new Date()) {
  const d = new Date(ts);
  if (Number.isNaN(d.getTime())) return '';
  const t = d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
  return d.toDateString() === now.toDateString() ? t : `${d.toLocaleDateString()} ${t}`;
}

/** decisionWords: how a settled approval reads on the card (pieces: text, or {code}). */
export function decisionWords(d) {
  const cmd = d.command ? { code: d.command } : 'a command';
  if (d.reason) {
    const when = d.at ? ` at ${clock(d.at)}` : '';
    return ['Nobody answered in time: the approval for ', cmd, ` expired${when}, so it was not run.`];
  }
  if (d.choice === 'deny') return ['You denied ', cmd, ' — it was not run.'];
  return ['You allowed ', cmd, ' once.'];
}

/**
 * progressWords: progress in the units the harness counts ("3 of 7 files", "2 of 5 steps",
 * "4 steps done"), only from real counts; never a percentage (a token-based percentage
 * would be made up). Nothing when the harness reports no count: the phase says what it does.
 */
export function progressWords(p) {
  if (!p || !Number.isFinite(p.completed)) return '';
  const unit = typeof p.unit === 'string' && /^[a-z][a-z ]{0,20}$/i.test(p.unit) ? p.unit : '';
  if (Number.isFinite(p.total) && p.total > 0) return `${p.completed} of ${p.total} ${unit || 'done'}`;
  return unit ? `${p.completed} ${unit} done` : '';
}

/**
 * usageWords: what a settled run used, as its card says it: "2,700 tokens · model qwen3-8b"
 * (the model the agent's gateway actually served; the record's usage.model). Either half
 * alone when only it is known; nothing when neither is.
 */
export function usageWords(u) {
  if (!u || typeof u !== 'object') return '';
  const parts = [];
  const n = Number.isFinite(u.totalTokens) && u.totalTokens > 0 ? u.totalTokens
    : (Number(u.inputTokens) || 0) + (Number(u.outputTokens) || 0);
  if (Number.isFinite(n) && n > 0) parts.push(`${String(Math.round(n)).replace(/\B(?=(\d{3})+(?!\d))/g, ',')} ${n === 1 ? 'token' : 'tokens'}`);
  if (typeof u.model === 'string' && u.model.trim()) parts.push(`model ${u.model.trim()}`);
  return parts.join(' · ');
}
