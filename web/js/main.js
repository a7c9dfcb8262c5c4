// The web chat. Everything shown comes from the user's persisted records and the run
// event stream; nothing is fabricated in the browser.
import { ApiClient, ApiError, NetworkError, newRequestId } from './api.js';
import { Auth } from './auth.js';
import { follow, newRunState, TERMINAL } from './follow.js';
import { renderMarkdown } from './render.js';

const cfg = window.PA_CONFIG || {};
const $ = (id) => document.getElementById(id);
const auth = new Auth(cfg);
const api = new ApiClient({ base: cfg.api || '', getToken: (force) => auth.token(force) });

const ui = {
  conv: null,               // current conversation id
  convCursor: '',
  runs: new Map(),          // run id → { state, follower, el }
  pending: null,            // an unsent message: { requestId, text, role, conv }
};

function el(tag, attrs = {}, ...children) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') n.className = v;
    else if (k.startsWith('on')) n.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null) n.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) n.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return n;
}

function showError(where, e) {
  const msg = e instanceof ApiError ? e.message : e instanceof NetworkError ? 'You are offline; retrying when the network is back.' : String(e?.message || e);
  $(where).textContent = msg;
}

// --- authentication -----------------------------------------------------------------
let signingUp = false;
function setMode(up) {
  signingUp = up;
  $('auth-title').textContent = up ? 'Create an account' : 'Sign in';
  $('auth-submit').textContent = up ? 'Create account' : 'Sign in';
  $('auth-toggle').textContent = up ? 'I have an account' : 'Create an account';
  $('name-row').hidden = !up;
}

function showAuth(note) {
  setMode(false);
  $('app').hidden = true;
  $('signout').hidden = true;
  $('auth').hidden = false;
  $('auth-note').hidden = !note;
  $('auth-note').textContent = note || '';
  if (cfg.demo && cfg.demo.email) {
    $('demo-hint').hidden = false;
    $('demo-hint').textContent = `Demo login: ${cfg.demo.email} / ${cfg.demo.password}`;
  }
}

$('auth-toggle').addEventListener('click', () => setMode(!signingUp));

$('auth-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  $('auth-error').textContent = '';
  try {
    const email = $('email').value.trim(), pw = $('password').value;
    if (signingUp) await auth.signUp(email, pw, $('name').value.trim());
    else await auth.signIn(email, pw);
    await enter();
  } catch (e) {
    $('auth-error').textContent = e?.message || 'could not sign in';
  }
});

$('signout').addEventListener('click', async () => {
  for (const r of ui.runs.values()) r.follower?.stop();
  ui.runs.clear();
  ui.conv = null;
  await auth.signOut();
  $('messages').replaceChildren();
  $('conversations').replaceChildren();
  showAuth();
});

async function enter() {
  $('auth').hidden = true;
  $('app').hidden = false;
  $('signout').hidden = false;
  $('auth-note').hidden = true;
  await loadConversations(true);
  refreshSystem();
  if (ui.pending) await sendPending();
}

// --- conversations --------------------------------------------------------------------
async function loadConversations(reset) {
  if (reset) { ui.convCursor = ''; $('conversations').replaceChildren(); }
  const page = await api.listConversations(ui.convCursor);
  for (const c of page.conversations) addConversation(c, false);
  ui.convCursor = page.next;
  $('more-convs').hidden = !page.next;
  if (reset && (ui.conv || page.conversations.length)) await openConversation(ui.conv || page.conversations[0].id);
}

function addConversation(c, top) {
  const li = el('li', {}, el('button', { 'data-id': c.id, onclick: () => openConversation(c.id) }, c.title));
  if (top) $('conversations').prepend(li); else $('conversations').append(li);
}

$('more-convs').addEventListener('click', () => loadConversations(false).catch((e) => showError('chat-error', e)));
$('menu').addEventListener('click', () => $('sidebar').classList.toggle('open'));
$('new-conv').addEventListener('click', async () => {
  try {
    const c = await api.createConversation('New conversation', newRequestId());
    addConversation(c, true);
    await openConversation(c.id);
  } catch (e) { showError('chat-error', e); }
});

async function openConversation(id) {
  for (const r of ui.runs.values()) r.follower?.stop();
  ui.runs.clear();
  ui.conv = id;
  $('sidebar').classList.remove('open');
  for (const b of $('conversations').querySelectorAll('button')) b.classList.toggle('active', b.dataset.id === id);
  const box = $('messages');
  box.replaceChildren();
  // Messages (paginated), then the runs of this conversation placed after their message.
  let cursor = '', msgs = [];
  do { const p = await api.listMessages(id, cursor); msgs = msgs.concat(p.messages); cursor = p.next; } while (cursor);
  let runs = [];
  cursor = '';
  do { const p = await api.listRuns(id, cursor); runs = runs.concat(p.runs); cursor = p.next; } while (cursor);
  const byMessage = new Map(runs.map((r) => [r.messageId, r]));
  const answered = new Set(msgs.filter((m) => m.role === 'assistant').map((m) => m.runId));
  for (const m of msgs) {
    box.append(messageEl(m));
    const r = byMessage.get(m.id);
    if (r) addRun(r, !answered.has(r.id));
  }
  box.scrollTop = box.scrollHeight;
}

function messageEl(m) {
  const body = el('div', { class: 'body' });
  if (m.role === 'user') body.textContent = m.text;
  else renderMarkdown(body, m.text);
  return el('div', { class: 'msg ' + m.role, 'data-sequence': m.sequence }, body);
}

// --- runs -------------------------------------------------------------------------------
function addRun(run, live) {
  const state = newRunState(run);
  const card = el('div', { class: 'run', 'data-run': run.id });
  const answer = el('div', { class: 'msg assistant', hidden: '' }, el('div', { class: 'body' }));
  $('messages').append(card, answer);
  const entry = { state, el: card, answer, follower: null };
  ui.runs.set(run.id, entry);
  drawRun(entry);
  if (live || !TERMINAL.has(run.status)) {
    entry.follower = follow(api, state, () => drawRun(entry));
  } else if (run.status === 'completed') {
    api.listArtifacts({ runId: run.id }).then((p) => { state.artifacts = p.artifacts; drawRun(entry); }).catch(() => {});
  }
}

function elapsed(state) {
  if (!state.startedAt) return '';
  const s = Math.max(0, Math.round((Date.now() - Date.parse(state.startedAt)) / 1000));
  return s < 60 ? `${s}s` : `${Math.floor(s / 60)}m ${s % 60}s`;
}

function drawRun(entry) {
  const s = entry.state, card = entry.el;
  const status = s.cancelling && !TERMINAL.has(s.status) ? 'cancelling…' : s.status.replaceAll('_', ' ');
  const lines = [el('span', { class: 'status ' + s.status }, status)];
  if (s.phase && !TERMINAL.has(s.status)) lines.push(' · ', s.phase);
  if (s.queueReason && !TERMINAL.has(s.status)) lines.push(' · ', s.queueReason + (s.queuePosition ? ` (#${s.queuePosition})` : ''));
  if (!TERMINAL.has(s.status) && s.startedAt) lines.push(' · ', elapsed(s));
  if (!TERMINAL.has(s.status) && s.heartbeatAt) lines.push(' · heartbeat ', ago(s.heartbeatAt));
  if (s.progress && s.progress.total) lines.push(' · ', `${s.progress.completed}/${s.progress.total}`);
  if (s.offline) lines.push(' · offline, will resume');
  if (s.authExpired) { showAuth('Your session expired. Sign in again; your draft is kept.'); }
  const kids = [el('div', {}, ...lines)];
  for (const t of s.tools) kids.push(el('div', { class: 'tool' }, `${t.done ? (t.error ? '✗' : '✓') : '…'} ${t.tool}${t.preview ? ': ' + t.preview : ''}`));
  if (s.approval) {
    const a = s.approval;
    kids.push(el('div', { class: 'approval' }, 'The assistant wants to run:', el('code', {}, a.command || ''),
      a.description ? el('div', {}, a.description) : null,
      el('div', { class: 'actions' },
        el('button', { onclick: () => decide(entry, 'once') }, 'Allow once'),
        el('button', { onclick: () => decide(entry, 'deny') }, 'Deny'))));
  }
  if (s.error && TERMINAL.has(s.status)) kids.push(el('div', { class: 'error' }, s.error));
  if (s.artifacts.length) {
    kids.push(el('div', { class: 'artifacts' }, 'Files: ', ...s.artifacts.map((f) =>
      el('a', { href: '#', 'data-artifact': f.id, onclick: (ev) => { ev.preventDefault(); downloadArtifact(f); } }, `${f.filename} (${fmtSize(f.size)})`))));
  }
  if (!TERMINAL.has(s.status) && !s.cancelling) {
    kids.push(el('div', { class: 'actions' }, el('button', { class: 'cancel', onclick: () => cancelRun(entry) }, 'Cancel')));
  }
  card.replaceChildren(...kids);
  if (s.text) {
    entry.answer.hidden = false;
    renderMarkdown(entry.answer.firstChild, s.text);
  }
  $('net').hidden = ![...ui.runs.values()].some((r) => r.state.offline);
}

function ago(ts) {
  const s = Math.max(0, Math.round((Date.now() - Date.parse(ts)) / 1000));
  return s < 60 ? `${s}s ago` : `${Math.floor(s / 60)}m ago`;
}

// Live runs: refresh the record's view (phase, queue position, heartbeat, progress) every
// 10 s; the event stream carries the rest.
setInterval(async () => {
  for (const entry of ui.runs.values()) {
    const s = entry.state;
    if (TERMINAL.has(s.status)) continue;
    try {
      const r = await api.getRun(s.id);
      Object.assign(s, { phase: r.phase, queueReason: r.queueReason, queuePosition: r.queuePosition,
        heartbeatAt: r.heartbeatAt, startedAt: r.startedAt, progress: r.progress });
      drawRun(entry);
    } catch { /* the follower reports connectivity */ }
  }
}, 10000);

function fmtSize(n) { return n > 1 << 20 ? (n / (1 << 20)).toFixed(1) + ' MiB' : n > 1024 ? Math.round(n / 1024) + ' KiB' : n + ' B'; }

async function decide(entry, choice) {
  try {
    await api.approve(entry.state.id, entry.state.approval.requestId, choice);
    entry.state.approval = null;
    entry.state.phase = choice === 'deny' ? 'denied' : 'approved';
    drawRun(entry);
  } catch (e) { showError('chat-error', e); }
}

async function cancelRun(entry) {
  try {
    const r = await api.cancel(entry.state.id);
    entry.state.cancelling = !TERMINAL.has(r.status);
    entry.state.status = r.status;
    drawRun(entry);
  } catch (e) { showError('chat-error', e); }
}

async function downloadArtifact(f) {
  try {
    const blob = await api.download(f);
    const url = URL.createObjectURL(blob);
    const a = el('a', { href: url, download: f.filename.split('/').pop() });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
  } catch (e) { showError('chat-error', e); }
}

// --- sending ---------------------------------------------------------------------------
$('composer').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const text = $('draft').value;
  if (!text.trim()) return;
  if (!ui.conv) {
    try {
      const c = await api.createConversation(text.slice(0, 60), newRequestId());
      addConversation(c, true);
      ui.conv = c.id;
    } catch (e) { return showError('chat-error', e); }
  }
  // The requestId is fixed before the first try, so a retry can never double the message.
  ui.pending = { requestId: newRequestId(), text, role: $('role').value, conv: ui.conv };
  sessionStorage.setItem('pa-pending', JSON.stringify(ui.pending));
  await sendPending();
});

async function sendPending() {
  const p = ui.pending;
  if (!p) return;
  $('chat-error').textContent = '';
  $('send').disabled = true;
  try {
    const res = await api.sendMessage(p.conv, p);
    ui.pending = null;
    sessionStorage.removeItem('pa-pending');
    $('draft').value = '';
    if (p.conv === ui.conv) {
      $('messages').append(messageEl({ role: 'user', text: p.text, sequence: res.sequence }));
      if (!ui.runs.has(res.runId)) addRun({ id: res.runId, status: res.status, messageId: res.messageId }, true);
      $('messages').scrollTop = $('messages').scrollHeight;
    }
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) return showAuth('Your session expired. Sign in again; your draft is kept.');
    showError('chat-error', e);
    if (e instanceof NetworkError || (e instanceof ApiError && e.status >= 500)) {
      setTimeout(() => { if (ui.pending === p) sendPending(); }, 2000); // same requestId
    }
  } finally {
    $('send').disabled = false;
  }
}
window.addEventListener('online', () => { if (ui.pending) sendPending(); });

// --- system status ------------------------------------------------------------------------
async function refreshSystem() {
  try {
    const s = await api.system();
    const box = $('system');
    box.replaceChildren(...s.devices.map((d) => el('div', { class: 'dev' + (d.stale ? ' unknown' : '') },
      `${d.device}: ${d.stale ? 'unknown (no recent heartbeat)' : d.state}`,
      el('br'), `loaded ${d.loadedModel || '—'}, active ${d.stale ? 'unknown' : (d.activeModel || '—')}`)),
      ...(s.queues || []).map((q) => el('div', {}, `${q.name}: ${q.pending} waiting, ${q.active} running`)));
    if (!s.devices.length && !(s.queues || []).length) box.textContent = 'No GPU reports yet.';
  } catch { /* shown as stale next time */ }
}
setInterval(() => { if (!$('app').hidden) refreshSystem(); }, 15000);

// --- start ---------------------------------------------------------------------------------
(async () => {
  const saved = sessionStorage.getItem('pa-pending');
  if (saved) { ui.pending = JSON.parse(saved); $('draft').value = ui.pending.text; }
  if ('serviceWorker' in navigator) navigator.serviceWorker.register('/sw.js').catch(() => {});
  if (await auth.current()) await enter().catch((e) => showError('chat-error', e));
  else showAuth();
})();
