// The web chat. Everything shown comes from the user's persisted records and the run
// event stream; nothing is fabricated in the browser.
import { ApiClient, ApiError, NetworkError, newRequestId } from './api.js';
import { Auth, Unreachable } from './auth.js';
import { follow, newRunState, TERMINAL } from './follow.js';
import { watchFeed } from './feed.js';
import { liveNote, showNote } from './sse.js';
import { titleFrom, statusLine, needsCard, decisionWords } from './view.js';
import { renderMarkdown, copyText } from './render.js';
import { StreamView } from './stream.js';
import { apiErrorText, runErrorText, tidy } from './errors.js';
import { Attachments, fmtBytes, clipIcon } from './attach.js';
import { tree as branchTree, path as branchPath, versions as branchVersions, parentFor, ROOT } from './branch.js';
import { exportJSON, exportMarkdown, fileName } from './export.js';
import { confirmDialog, helpDialog } from './dialog.js';
import { mountSearch } from './search.js';

// An invitation link carries its token in the URL fragment (#invite=…), which browsers never
// send to a server. Take it first and remove it from the address bar (and so from history,
// bookmarks and any Referer) before anything else runs.
let invitation = '';
function takeInvitation() {
  const m = /(?:^#|&)invite=([A-Za-z0-9_-]+)/.exec(location.hash);
  if (!m) return false;
  invitation = m[1];
  history.replaceState(history.state, '', location.pathname + location.search);
  return true;
}
takeInvitation();

const cfg = window.PA_CONFIG || {};
const $ = (id) => document.getElementById(id);
const auth = new Auth(cfg);
const api = new ApiClient({ base: cfg.api || '', getToken: (force, refused) => auth.token(force, refused) });
// Files attached to the next message (attach.js): uploaded with the user's own session.
const attach = new Attachments({ sdk: window.Appwrite, client: auth.client, userId: () => auth.user?.$id,
  list: $('attachments'), say: (t, bad) => setComposerStatus(t, bad) });

const ui = {
  conv: null,               // current conversation id (null: a new, not yet created one)
  convCursor: '',
  convs: new Map(),         // id → { title, li }
  runs: new Map(),          // run id → entry
  msgIds: new Set(),        // ids of the messages shown (a change from the feed is shown once)
  feed: null,               // the change feed's watcher
  pending: null,            // an unsent message: { requestId, text, role, conv, title }
  sendTry: 0,
  sendTimer: null,
  serverDown: false,        // the connectivity watch could not reach the API
  stick: true,              // follow the newest content while streaming
  autoTop: 0,               // scrollTop after the last automatic scroll
  // Branches (branch.js): the open conversation's tree, the user messages shown, the
  // version chosen at each turn (parent → message id), and the message being edited.
  tree: null,
  path: [],
  chosen: new Map(),
  editing: null,            // { id, parentId, attachments }
  records: new Map(),       // run id → its record as listed (role, status: regenerate and retry)
};

// --- links: /c/<id> ------------------------------------------------------------------------
// The open conversation is in the address (back and forward move between conversations); a
// deep link opened signed out is kept while signing in, then opened.
const convFromPath = () => { const m = /^\/c\/([A-Za-z0-9._-]{1,36})\/?$/.exec(location.pathname); return m ? m[1] : null; };
function showInAddress(id) {
  const want = id ? '/c/' + id : '/';
  if (location.pathname !== want) history.pushState({ conv: id }, '', want + location.search);
}
window.addEventListener('popstate', () => {
  if ($('app').hidden) return;
  const id = convFromPath();
  if (id === ui.conv) return;
  if (id) openConversation(id, { fromHistory: true }).catch((e) => showError('chat-error', e)); else newConversation({ fromHistory: true });
});

function el(tag, attrs = {}, ...children) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') n.className = v;
    else if (k.startsWith('on')) n.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) n.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children) if (c !== null && c !== undefined && c !== false) n.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return n;
}

const setText = (node, text) => { if (node.textContent !== text) node.textContent = text; };

function errorText(e) {
  if (e instanceof ApiError) return apiErrorText(e);
  if (e instanceof NetworkError) return e.timeout ? 'The server is not answering.' : 'You are offline or the server cannot be reached.';
  return tidy(e?.message || String(e)) || 'Something went wrong.';
}

function showError(where, e) { $(where).textContent = errorText(e); }

// --- theme -------------------------------------------------------------------------------
const THEMES = ['system', 'dark', 'light'];
function currentTheme() { return document.documentElement.dataset.theme || 'system'; }
function applyTheme(t) {
  if (t === 'system') delete document.documentElement.dataset.theme; else document.documentElement.dataset.theme = t;
  try { if (t === 'system') localStorage.removeItem('pa-theme'); else localStorage.setItem('pa-theme', t); } catch { /* not remembered */ }
  const label = { system: 'follow the system', dark: 'dark', light: 'light' }[t];
  $('theme').setAttribute('aria-label', `Colour theme: ${label}`);
  $('theme').title = `Theme: ${label} (click to change)`;
  $('theme').textContent = { system: '◐', dark: '☾', light: '☀' }[t];
}
$('theme').addEventListener('click', () => applyTheme(THEMES[(THEMES.indexOf(currentTheme()) + 1) % THEMES.length]));
applyTheme(currentTheme());

// --- authentication -----------------------------------------------------------------
// The product is closed: an account is made only by redeeming an invitation, so the sign-up
// form exists only with an invitation (from the link's fragment or pasted here).
let signingUp = false;
function setMode(up) {
  signingUp = up;
  $('auth-title').textContent = up ? 'Create your account' : 'Sign in';
  $('auth-submit').textContent = up ? 'Create account' : 'Sign in';
  $('auth-toggle').textContent = up ? 'I already have an account' : 'I have an invitation';
  $('name-row').hidden = !up;
  $('invite-row').hidden = !up || !!invitation;
  $('invite').required = up && !invitation;
  $('password').autocomplete = up ? 'new-password' : 'current-password';
  $('auth-error').textContent = '';
}

/** The token in whatever was pasted: the code itself or the whole invitation link. */
function tokenFrom(text) {
  const s = String(text || '').trim();
  const m = /invite=([A-Za-z0-9_-]+)/.exec(s);
  return m ? m[1] : s;
}

function showAuth(note) {
  setMode(!!invitation);
  $('menu').hidden = true; // no conversations to list before signing in
  $('help').hidden = true;
  $('app').hidden = true;
  $('gate').hidden = true;
  $('signout').hidden = true;
  $('who').hidden = true;
  $('auth').hidden = false;
  $('auth-form').hidden = false; // signedInOrWait hides it while the server cannot be reached
  if (invitation && !note) note = 'You have been invited. Choose your email and password to create your account.';
  $('auth-note').hidden = !note;
  $('auth-note').textContent = note || '';
  if (cfg.demo && cfg.demo.email) {
    $('demo-hint').hidden = false;
    $('demo-hint').textContent = `Demo login: ${cfg.demo.email} / ${cfg.demo.password}`;
  }
}

$('auth-toggle').addEventListener('click', () => setMode(!signingUp));
// An invitation link opened in a tab that already shows the app (only the fragment changed).
window.addEventListener('hashchange', async () => {
  if (!takeInvitation()) return;
  if (auth.user) await auth.signOut();
  showAuth();
});

$('auth-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  $('auth-error').textContent = '';
  $('auth-submit').disabled = true;
  try {
    const email = $('email').value.trim(), pw = $('password').value;
    if (signingUp) {
      const token = invitation || tokenFrom($('invite').value);
      if (!token) throw new Error('Enter the invitation code you were sent.');
      try {
        await api.redeem({ token, email, password: pw, name: $('name').value.trim() });
      } catch (e) {
        if (e instanceof ApiError && (e.code === 'invitation_used' || e.code === 'account_exists')) {
          // Either way an account exists: offer the sign-in form, keeping what was typed.
          invitation = '';
          setMode(false);
        }
        throw e;
      }
      invitation = '';
      $('invite').value = '';
    }
    await auth.signIn(email, pw);
    await enter();
  } catch (e) {
    $('auth-error').textContent = e instanceof ApiError || e instanceof NetworkError ? errorText(e)
      : (tidy(e?.message) || (signingUp ? 'Could not create the account.' : 'Could not sign in.'));
  } finally {
    $('auth-submit').disabled = false;
  }
});

$('signout').addEventListener('click', async () => {
  showAdmin(false);
  $('admin-toggle').hidden = true;
  $('admin').replaceChildren();
  adminUI = null;
  ui.feed?.stop();
  ui.feed = null;
  for (const r of ui.runs.values()) r.follower?.stop();
  ui.runs.clear();
  updateNet();
  ui.conv = null;
  ui.convs.clear();
  await auth.signOut();
  $('messages').replaceChildren();
  $('conversations').replaceChildren();
  showAuth();
});

// A signed-in account that is not a member sees only this: nothing else would answer it.
function showGate(me) {
  $('menu').hidden = true;
  $('auth').hidden = true;
  $('app').hidden = true;
  $('gate').hidden = false;
  $('signout').hidden = false;
  const who = cfg.adminContact ? `Ask ${cfg.adminContact}` : 'Ask the person who runs this assistant';
  $('gate-text').textContent = `Your account ${me.email || ''} has not been admitted to the assistant yet. `
    + `${who} to admit it, or for an invitation. Once admitted, choose “Check again”.`;
}
$('gate-retry').addEventListener('click', async () => {
  $('gate-error').textContent = '';
  $('gate-retry').disabled = true;
  try { await auth.token(true); await enter(); } catch (e) { $('gate-error').textContent = errorText(e); } finally { $('gate-retry').disabled = false; }
});

const ROLE_NAMES = { chat: 'Chat', research: 'Research job', coding: 'Coding job' };
/** The role picker offers only what GET /api/roles allows this account. */
async function loadRoles() {
  const { roles = [] } = await api.roles();
  const sel = $('role');
  const keep = sel.value;
  const names = roles.map((r) => r.name).sort((x, y) => (x === 'chat' ? -1 : y === 'chat' ? 1 : x.localeCompare(y)));
  sel.replaceChildren(...names.map((n) => el('option', { value: n }, ROLE_NAMES[n] || n.charAt(0).toUpperCase() + n.slice(1))));
  if (names.includes(keep)) sel.value = keep;
  sel.disabled = names.length === 0;
  $('send').disabled = names.length === 0;
  if (!names.length) $('chat-error').textContent = 'Your account may not use any kind of work yet. Ask an administrator.';
}

async function enter() {
  const me = await api.me();
  if (!me.member) { showGate(me); return; }
  $('gate').hidden = true;
  $('auth').hidden = true;
  $('menu').hidden = false;
  $('help').hidden = false;
  $('app').hidden = false;
  $('signout').hidden = false;
  $('auth-note').hidden = true;
  $('chat-error').textContent = '';
  const u = auth.user || {};
  $('who').hidden = !u.email;
  $('who').textContent = u.name ? `${u.name} · ${u.email}` : (u.email || '');
  $('who').title = `Signed in as ${u.email || ''}`;
  $('who-side').textContent = u.email ? `Signed in as ${u.name ? u.name + ' (' + u.email + ')' : u.email}` : '';
  $('admin-toggle').hidden = !me.admin;
  if (!me.admin) showAdmin(false);
  await loadRoles();
  // The feed's position first, then the lists: a change made in between is in the feed.
  let from = null;
  try { from = (await api.feed()).next; } catch { /* the watcher asks again */ }
  await loadConversations(true);
  ui.feed?.stop();
  ui.systemFallback = false;
  ui.feed = watchFeed(api, { from, onEvents: onFeed, onReset: () => syncFromElsewhere(true), onSystem: renderSystem, onStatus: onFeedStatus });
  if (ui.pending) await sendPending();
}

// --- the admin console (admins only; the server checks every call) ------------------------
let adminUI = null;
async function showAdmin(open) {
  $('admin').hidden = !open;
  document.querySelector('.chat').hidden = open;
  $('admin-toggle').setAttribute('aria-expanded', String(open));
  $('admin-toggle').textContent = open ? 'Back to chat' : 'Admin';
  if (!open) return;
  try {
    if (!adminUI) {
      const { mountAdmin } = await import('./admin.js');
      adminUI = mountAdmin($('admin'), api, { el, errorText, copyText });
    }
    await adminUI.refresh();
  } catch (e) { $('admin').replaceChildren(el('p', { class: 'error' }, errorText(e))); }
}
$('admin-toggle').addEventListener('click', () => showAdmin($('admin').hidden));

// --- conversations --------------------------------------------------------------------
async function loadConversations(reset) {
  if (reset) { ui.convCursor = ''; ui.convs.clear(); $('conversations').replaceChildren(); }
  const page = await api.listConversations(ui.convCursor);
  for (const c of page.conversations) addConversation(c, false);
  ui.convCursor = page.next;
  $('more-convs').hidden = !page.next;
  filterConversations();
  if (reset) {
    const linked = convFromPath();
    if (linked) {
      try { await openConversation(linked, { fromHistory: true }); } catch (e) {
        newConversation();
        $('chat-error').textContent = e instanceof ApiError && e.status === 404 ? 'That conversation does not exist (or was deleted).' : errorText(e);
      }
    } else if (ui.conv || page.conversations.length) await openConversation(ui.conv || page.conversations[0].id);
    else newConversation();
  }
}

function addConversation(c, top) {
  if (ui.convs.has(c.id)) return;
  const btn = el('button', { type: 'button', class: 'conv', 'data-id': c.id, onclick: () => openConversation(c.id) }, c.title);
  const rename = el('button', { type: 'button', class: 'conv-act rename', 'aria-label': `Rename “${c.title}”`, title: 'Rename', onclick: () => startRename(c.id) }, icon('pencil'));
  const del = el('button', { type: 'button', class: 'conv-act delete', 'aria-label': `Delete “${c.title}”`, title: 'Delete', onclick: () => deleteConversation(c.id) }, icon('trash'));
  const li = el('li', { class: 'conv-item', 'data-id': c.id }, btn, rename, del);
  ui.convs.set(c.id, { title: c.title, li, btn, rename, del });
  if (c.id === ui.conv) { btn.classList.add('active'); btn.setAttribute('aria-current', 'true'); }
  if (top) $('conversations').prepend(li); else $('conversations').append(li);
  filterConversations();
}

// Icons are inline SVG (no emoji font needed), drawn in the text colour.
const ICONS = {
  pencil: 'M4 20h4L19 9l-4-4L4 16v4zM14 6l4 4',
  trash: 'M4 7h16M9 7V4h6v3M6 7l1 13h10l1-13M10 11v6M14 11v6',
};
function icon(name, size = 16) {
  const NS = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(NS, 'svg');
  for (const [k, v] of Object.entries({ viewBox: '0 0 24 24', width: size, height: size, 'aria-hidden': 'true', focusable: 'false', class: 'icon-svg' })) svg.setAttribute(k, v);
  const path = document.createElementNS(NS, 'path');
  for (const [k, v] of Object.entries({ d: ICONS[name], fill: 'none', stroke: 'currentColor', 'stroke-width': '2', 'stroke-linecap': 'round', 'stroke-linejoin': 'round' })) path.setAttribute(k, v);
  svg.append(path);
  return svg;
}

function setConversationTitle(id, title) {
  const c = ui.convs.get(id);
  if (!c || !title) return;
  c.title = title;
  setText(c.btn, title);
  c.rename.setAttribute('aria-label', `Rename “${title}”`);
  c.del.setAttribute('aria-label', `Delete “${title}”`);
  filterConversations();
}

/** removeConversation takes a deleted conversation off the list (and off the screen). */
function removeConversation(id, elsewhere = false) {
  const c = ui.convs.get(id);
  if (c) { c.li.remove(); ui.convs.delete(id); }
  filterConversations();
  if (ui.conv === id) {
    newConversation();
    if (elsewhere) $('chat-error').textContent = 'That conversation was deleted in another tab or on another device.';
  }
}

/** bumpConversation moves a conversation with new activity to the top of the list. */
function bumpConversation(id) {
  const c = ui.convs.get(id);
  if (c && $('conversations').firstElementChild !== c.li) $('conversations').prepend(c.li);
}

// Rename in place: the title becomes a text field; Enter (or leaving it) saves, Escape
// keeps the old title.
function startRename(id) {
  const c = ui.convs.get(id);
  if (!c || c.li.querySelector('input')) return;
  const input = el('input', { class: 'conv-title', value: c.title, 'aria-label': 'New title', maxlength: 256 });
  let done = false;
  const finish = async (save) => {
    if (done) return;
    done = true;
    const title = input.value.trim().replace(/\s+/g, ' ');
    input.replaceWith(c.btn);
    c.btn.focus();
    if (!save || !title || title === c.title) return;
    const old = c.title;
    setConversationTitle(id, title);
    try {
      const v = await api.renameConversation(id, title);
      setConversationTitle(id, v.title);
    } catch (e) {
      setConversationTitle(id, old);
      showError('chat-error', e);
    }
  };
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter') { e.preventDefault(); finish(true); } else if (e.key === 'Escape') { e.preventDefault(); e.stopPropagation(); finish(false); }
  });
  input.addEventListener('blur', () => finish(true));
  c.btn.replaceWith(input);
  input.focus();
  input.select();
}

async function deleteConversation(id) {
  const c = ui.convs.get(id);
  if (!c) return;
  if (!await confirmDialog({ title: 'Delete this conversation?', text: `“${c.title}”: its messages are deleted and any work still running in it is cancelled.`, ok: 'Delete', danger: true })) return;
  c.del.disabled = true;
  try {
    await api.deleteConversation(id);
    removeConversation(id);
  } catch (e) {
    c.del.disabled = false;
    if (e instanceof ApiError && e.status === 404) removeConversation(id); else showError('chat-error', e);
  }
}

// --- the change feed: what happened in other tabs and on other devices -----------------
async function onFeed(events) {
  for (const ev of events) {
    const d = ev.data || {};
    try {
      switch (ev.type) {
        case 'conversation.created': addConversation(d, true); break;
        case 'conversation.updated': setConversationTitle(d.id, d.title); break;
        case 'conversation.deleted': removeConversation(d.id, true); break;
        case 'message.created': await showMessageFromElsewhere(d); break;
      }
    } catch { /* the next change, or coming back into view, catches up */ }
  }
}

async function showMessageFromElsewhere(d) {
  bumpConversation(d.conversationId);
  if (d.conversationId !== ui.conv) return;
  if (ui.pending && ui.pending.requestId === d.requestId) return; // this tab is sending it
  if (ui.msgIds.has(d.messageId) || ui.runs.has(d.runId)) return;
  let text = d.text;
  if (d.textOmitted) {
    let cursor = '';
    do {
      const p = await api.listMessages(d.conversationId, cursor);
      const m = p.messages.find((x) => x.id === d.messageId);
      if (m) { text = m.text; break; }
      cursor = p.next;
    } while (cursor);
  }
  if (d.conversationId !== ui.conv || ui.msgIds.has(d.messageId) || ui.runs.has(d.runId)) return;
  const last = ui.path[ui.path.length - 1];
  if (d.parentId && d.parentId !== last?.id) { await openConversation(ui.conv, { keepChoice: true }); return; } // another branch
  $('messages').querySelector('.empty')?.remove();
  const m = { id: d.messageId, role: 'user', text: text || '', sequence: d.sequence, attachments: d.attachments, parentId: d.parentId, runId: d.runId };
  joinPath(m);
  $('messages').append(messageEl(m));
  addRun({ id: d.runId, status: d.status || 'queued', role: d.role, messageId: d.messageId }, { live: true });
  scrollToEnd();
}

function filterConversations() {
  const q = $('conv-search').value.trim().toLowerCase();
  let shown = 0;
  for (const { title, li } of ui.convs.values()) {
    li.hidden = !!q && !title.toLowerCase().includes(q);
    if (!li.hidden) shown++;
  }
  const empty = $('conv-empty');
  empty.hidden = shown > 0;
  empty.textContent = ui.convs.size === 0 ? 'No conversations yet. Your first message starts one.'
    : `No conversation title contains “${$('conv-search').value.trim()}”.`;
}
$('conv-search').addEventListener('input', filterConversations);
// Messages found by the server, below the titles; choosing one opens its branch there.
mountSearch({ input: $('conv-search'), list: $('hits'), api, open: (h) => openConversation(h.conversationId, { focus: h }).catch((e) => showError('chat-error', e)) });

$('more-convs').addEventListener('click', () => loadConversations(false).catch((e) => showError('chat-error', e)));
function setSidebar(open) {
  $('sidebar').classList.toggle('open', open);
  $('menu').setAttribute('aria-expanded', String(open));
}
$('menu').addEventListener('click', () => setSidebar(!$('sidebar').classList.contains('open')));
document.addEventListener('keydown', (e) => { if (e.key === 'Escape' && $('sidebar').classList.contains('open')) { setSidebar(false); $('menu').focus(); } });

// "+ New conversation" opens an empty chat; the conversation is created with the first
// message, titled from it (the API has no rename).
function newConversation({ fromHistory = false } = {}) {
  stopFollowers();
  ui.conv = null;
  ui.tree = null; ui.path = []; ui.chosen = new Map(); ui.records.clear();
  cancelEdit();
  if (!fromHistory) showInAddress(null);
  $('chat-bar').hidden = true;
  setSidebar(false);
  for (const b of $('conversations').querySelectorAll('button.conv')) { b.classList.toggle('active', false); b.removeAttribute('aria-current'); }
  $('messages').replaceChildren(emptyState());
  updateComposer();
  if (matchMedia('(pointer: fine)').matches) $('draft').focus(); // no keyboard pop-up on phones
}
$('new-conv').addEventListener('click', () => newConversation());

function emptyState() {
  return el('div', { class: 'empty' },
    el('h2', {}, 'Start a conversation'),
    el('p', {}, 'Pick the kind of work under the message box:'),
    el('dl', {},
      el('dt', {}, 'Chat'), el('dd', {}, 'Quick answers from the chat model. Nothing runs on your behalf.'),
      el('dt', {}, 'Research job'), el('dd', {}, 'Takes longer. It can gather sources and save notes as files you can download.'),
      el('dt', {}, 'Coding job'), el('dd', {}, 'Can run commands on the work machine, and asks you first before running anything that could change it.')),
    el('p', { class: 'note' }, 'Jobs keep running if you close this tab; come back to see the result.'));
}

function stopFollowers() {
  // A message waiting for an answer of the view being left is sent now.
  if (ui.pending?.waitFor) { ui.pending.waitFor = null; setTimeout(sendPending); }
  for (const r of ui.runs.values()) r.follower?.stop();
  ui.runs.clear();
  ui.msgIds.clear();
}

// Only the latest call renders: two racing for the same conversation (a sync and a start
// after a reconnect) both appended, and the history showed twice. The branch shown is the
// chosen version of each turn (‹ 1/2 ›), the newest by default; a run's answer follows its
// message.
let opening = 0;
async function openConversation(id, { fromHistory = false, keepChoice = false, focus = null } = {}) {
  const mine = ++opening;
  if (id !== ui.conv || !keepChoice) ui.chosen = new Map();
  if (id !== ui.conv) cancelEdit();
  // Messages (paginated), then the runs of this conversation placed after their message.
  const readMessages = async () => {
    let cursor = '', all = [];
    do { const p = await api.listMessages(id, cursor); all = all.concat(p.messages); cursor = p.next; } while (cursor);
    return all;
  };
  let msgs = await readMessages();
  let runs = [];
  let cursor = '';
  do { const p = await api.listRuns(id, cursor); runs = runs.concat(p.runs); cursor = p.next; } while (cursor);
  // A run that completed between the two reads has an answer the first read missed (a
  // quick answer to an edit or a regeneration showed "done" and no text, as nothing is
  // followed once a run has ended): the messages are read again.
  const answered = new Set(msgs.filter((m) => m.role === 'assistant' && m.runId).map((m) => m.runId));
  const asked = new Set(msgs.filter((m) => m.role === 'user').map((m) => m.id));
  if (runs.some((r) => r.status === 'completed' && !answered.has(r.id) && asked.has(r.messageId))) msgs = await readMessages();
  if (mine !== opening) return; // opened again meanwhile (this or another)
  stopFollowers();
  ui.conv = id;
  if (!fromHistory) showInAddress(id);
  setSidebar(false);
  for (const b of $('conversations').querySelectorAll('button.conv')) {
    b.classList.toggle('active', b.dataset.id === id);
    if (b.dataset.id === id) b.setAttribute('aria-current', 'true'); else b.removeAttribute('aria-current');
  }
  const box = $('messages');
  box.replaceChildren();
  $('chat-error').textContent = '';
  $('chat-bar').hidden = false;
  setText($('chat-title'), ui.convs.get(id)?.title || '');
  ui.records = new Map(runs.map((r) => [r.id, r]));
  const byMessage = new Map(runs.map((r) => [r.messageId, r]));
  // An answer belongs right after its run's message, not where it finished.
  const answerOf = new Map(msgs.filter((m) => m.role === 'assistant' && m.runId).map((m) => [m.runId, m]));
  ui.msgs = msgs;
  ui.tree = branchTree(msgs);
  // A message found by search: the branch that holds it (an answer: its run's message).
  const target = focus && (focus.role === 'user' ? focus.messageId : msgs.find((m) => m.role === 'user' && m.runId && m.runId === focus.runId)?.id);
  for (let at = target; at && ui.tree.parent.has(at); at = ui.tree.parent.get(at)) ui.chosen.set(ui.tree.parent.get(at), at);
  ui.path = branchPath(ui.tree, ui.chosen);
  for (const m of msgs) if (m.role === 'system') box.append(messageEl(m));
  for (const m of ui.path) {
    box.append(messageEl(m));
    const r = byMessage.get(m.id);
    if (r) addRun(r, { answer: answerOf.get(r.id) });
  }
  if (!msgs.length) box.append(emptyState());
  rememberKind(ui.path.length ? byMessage.get(ui.path[ui.path.length - 1].id)?.role : null);
  updateComposer();
  const found = focus && (focus.role === 'user' ? box.querySelector(`.msg.user[data-id="${CSS.escape(focus.messageId)}"]`) : ui.runs.get(focus.runId)?.answer);
  if (found) {
    ui.stick = false;
    requestAnimationFrame(() => { found.scrollIntoView({ block: 'center' }); found.classList.add('flash'); setTimeout(() => found.classList.remove('flash'), 2000); });
  } else scrollToEnd(true);
}

// The kind-of-work picker follows the conversation: its latest turn's kind (when this
// account may still use it), so a follow-up goes where the conversation was going.
function rememberKind(role) {
  const sel = $('role');
  if (role && [...sel.options].some((o) => o.value === role)) sel.value = role;
}

function messageEl(m) {
  if (m.id) ui.msgIds.add(m.id);
  const body = el('div', { class: 'body' });
  if (m.role === 'user') body.textContent = m.text;
  else renderMarkdown(body, m.text);
  const extra = [];
  if (m.role === 'user' && m.id) {
    const v = ui.tree && ui.tree.byId.has(m.id) ? branchVersions(ui.tree, m.id) : { index: 1, count: 1, siblings: [] };
    if (v.count > 1) {
      const go = (d) => () => chooseVersion(m.id, v.siblings[v.index - 1 + d].id);
      extra.push(el('span', { class: 'versions', role: 'group', 'aria-label': 'Versions of this message' },
        el('button', { type: 'button', class: 'ver-prev', 'aria-label': 'Previous version', disabled: v.index === 1, onclick: go(-1) }, '‹'),
        el('span', { class: 'ver-pos' }, `${v.index}/${v.count}`),
        el('button', { type: 'button', class: 'ver-next', 'aria-label': 'Next version', disabled: v.index === v.count, onclick: go(1) }, '›')));
    }
    extra.push(el('button', { type: 'button', class: 'edit', 'aria-label': 'Edit this message', onclick: () => startEdit(m) }, 'Edit'));
  }
  return el('div', { class: 'msg ' + m.role, 'data-sequence': m.sequence, 'data-id': m.id }, body, attachmentsEl(m.attachments), messageTools(() => m.text, extra));
}

/** chooseVersion shows another version of a turn (and, below it, that version's branch). */
function chooseVersion(from, to) {
  const parent = ui.tree.parent.get(from) ?? '';
  ui.chosen.set(parent, to);
  const keep = box.scrollTop;
  openConversation(ui.conv, { keepChoice: true }).then(() => {
    ui.stick = false;
    box.scrollTop = keep;
    box.querySelector(`.msg.user[data-id="${CSS.escape(to)}"] .versions button:not(:disabled)`)?.focus();
  }).catch((e) => showError('chat-error', e));
}

// --- edit, regenerate, retry ---------------------------------------------------------------
// Each makes a new user message beside the one it replaces (parentFor: the same parent), so
// the earlier version and its answer stay one click away. The requestId is fixed before the
// first try: a repeat is admitted once.
function startEdit(m) {
  if (!m?.id || ui.pending) return;
  ui.editing = { id: m.id, parentId: ui.tree ? parentFor(ui.tree, m.id) : ROOT, attachments: (m.attachments || []).map((a) => (typeof a === 'string' ? { id: a } : a)) };
  $('draft').value = m.text;
  $('composer').classList.add('editing');
  setComposerStatus('Editing your message: sending makes a new version (the earlier one stays). Escape cancels.');
  $('draft').focus();
  $('draft').setSelectionRange($('draft').value.length, $('draft').value.length);
  updateCounter();
}
function cancelEdit() {
  if (!ui.editing) return;
  ui.editing = null;
  $('composer').classList.remove('editing');
  $('draft').value = '';
  setComposerStatus('');
  updateCounter();
}

/** resend sends a turn again as a sibling: a regeneration (any kind of work) or a retry. */
async function resend(messageId, { role, retryOf = '' }) {
  const m = ui.tree?.byId.get(messageId);
  if (!m || ui.pending) return;
  ui.pending = { requestId: newRequestId(), text: m.text, role, conv: ui.conv, title: null, parentId: parentFor(ui.tree, m.id), retryOf,
    attachments: (m.attachments || []).map((a) => (typeof a === 'string' ? { id: a } : a)), branch: true, tool: true };
  ui.sendTry = 0;
  try { sessionStorage.setItem('pa-pending', JSON.stringify(ui.pending)); } catch { /* kept in memory */ }
  await sendPending();
}



// The files a message carries: {id, name, size} when this tab sent it, else ids whose
// names are read with the user's own session.
function attachmentsEl(list) {
  if (!list?.length) return null;
  const ul = el('ul', { class: 'attachments', 'aria-label': 'Attached files' });
  for (const a of list) {
    const li = el('li', {}, clipIcon(13), el('span', { class: 'name' }, a.name || 'file'), ' ', el('span', { class: 'size' }, a.size ? fmtBytes(a.size) : ''));
    ul.append(li);
    if (!a.name) {
      attach.describe(a.id || a).then((d) => {
        li.querySelector('.name').textContent = d.name;
        li.querySelector('.size').textContent = d.size ? fmtBytes(d.size) : '';
      });
    }
  }
  return ul;
}

function messageTools(getText, extra = []) {
  const b = el('button', { type: 'button', class: 'copy', 'aria-label': 'Copy message' }, 'Copy');
  b.addEventListener('click', () => copyText(getText(), b));
  return el('div', { class: 'msg-tools' }, ...extra, b);
}

const kindName = (n) => ROLE_NAMES[n] || n.charAt(0).toUpperCase() + n.slice(1);
/** regenerateTools: Regenerate (the same kind of work) and "as…" another kind. */
function regenerateTools(entry) {
  const again = el('button', { type: 'button', class: 'regenerate', 'aria-label': 'Regenerate this answer', onclick: () => resend(entry.msgId, { role: entry.state.role }) }, 'Regenerate');
  const as = el('select', { class: 'regenerate-as', 'aria-label': 'Regenerate as another kind of work' },
    el('option', { value: '' }, 'as…'), ...[...$('role').options].map((o) => el('option', { value: o.value }, o.textContent)));
  as.addEventListener('change', () => { const role = as.value; as.value = ''; if (role) resend(entry.msgId, { role }); });
  return [again, as];
}

// Work started elsewhere (another tab, the CLI, a phone) arrives through the change feed
// within a second. When the feed reports a hole (reset), and when this tab comes back
// into view, the lists are read again: new conversations join the list, deleted ones
// leave it, and the open conversation is re-read if it has runs this tab has not seen.
// A request arriving while a sync is in flight is not dropped: that sync runs once more
// when it ends (its reads may predate what the request is about).
let syncing = false, syncAgain = false;
async function syncFromElsewhere(force = false) {
  if ($('app').hidden || (!force && document.visibilityState === 'hidden')) return;
  if (syncing) { syncAgain = true; return; }
  syncing = true;
  try {
    do { syncAgain = false; await syncOnce(); } while (syncAgain && !$('app').hidden);
  } finally { syncing = false; }
}
async function syncOnce() {
  try {
    const page = await api.listConversations('');
    for (const c of [...page.conversations].reverse()) {
      if (!ui.convs.has(c.id)) addConversation(c, true); else setConversationTitle(c.id, c.title);
    }
    if (ui.conv && !page.conversations.some((c) => c.id === ui.conv)) {
      // Not on the first page: still there, or deleted elsewhere?
      try { await api.getConversation(ui.conv); } catch (e) { if (e instanceof ApiError && e.status === 404) removeConversation(ui.conv, true); }
    }
    if (ui.conv && !ui.pending) {
      const conv = ui.conv;
      const p = await api.listRuns(conv);
      // Only if that conversation is still the open one and nothing is being sent: runs
      // listed for the one left meanwhile ("+ New conversation") are not this view's, and
      // re-opening would stop the follower of the message just sent.
      // Runs of other versions (branch.js) are known, not shown: only new ones count.
      if (ui.conv === conv && !ui.pending && p.runs.some((r) => !ui.runs.has(r.id) && !ui.records.has(r.id))) {
        const keep = box.scrollTop, stuck = ui.stick;
        await openConversation(ui.conv, { keepChoice: true });
        if (!stuck) { ui.stick = false; box.scrollTop = keep; }
      }
    }
  } catch { /* the next focus tries again */ }
}
document.addEventListener('visibilitychange', () => { if (document.visibilityState === 'visible') syncFromElsewhere(); });
window.addEventListener('focus', () => syncFromElsewhere());

// --- runs -------------------------------------------------------------------------------
/**
 * addRun shows a run: its card (status, tools, approvals, files) and its answer. Live runs
 * are followed; settled work runs are replayed once from their events so text streamed in
 * earlier turns stays; settled chat runs show the stored answer.
 */
function addRun(run, { answer = null, live = false } = {}) {
  const state = newRunState(run);
  const entry = { state, msgId: run.messageId, follower: null, view: null, seen: { tools: 0, approvalId: null, artifacts: 0, decisions: 0 }, firstDraw: Date.now() };
  buildCard(entry);
  $('messages').append(entry.card, entry.answer);
  ui.runs.set(run.id, entry);
  const terminal = TERMINAL.has(run.status);
  if (answer && answer.text) {
    entry.stored = answer.text;
    entry.view.finish(answer.text);
    entry.answer.hidden = false;
  }
  if (live || !terminal || state.role !== 'chat') {
    entry.follower = follow(api, state, () => drawRun(entry));
    entry.follower.done.then(() => modelServed(entry));
  }
  drawRun(entry);
  if (!terminal) setTimeout(() => drawRun(entry), 1600); // "thinking…" for a slow first token
}

function buildCard(entry) {
  const s = entry.state;
  const statusEl = el('span', { class: 'status' });
  const detail = el('span', { class: 'detail' });
  const tools = el('ul', { class: 'tools', hidden: true });
  const cmd = el('code');
  const desc = el('div', { class: 'desc' });
  const allow = el('button', { type: 'button', class: 'allow', onclick: () => decide(entry, 'once') }, 'Allow once');
  const deny = el('button', { type: 'button', class: 'deny', onclick: () => decide(entry, 'deny') }, 'Deny');
  const approval = el('div', { class: 'approval', hidden: true, role: 'group', 'aria-label': 'Approval needed' },
    el('div', { class: 'ask' }, 'The assistant wants to run this command:'), cmd, desc, el('div', { class: 'actions' }, allow, deny));
  const decisions = el('ul', { class: 'decisions', hidden: true });
  const error = el('div', { class: 'error', hidden: true });
  const files = el('div', { class: 'artifacts', hidden: true }, el('span', {}, 'Files: '));
  const notSaved = el('ul', { class: 'not-saved', hidden: true, 'aria-label': 'Files not saved' });
  const cancel = el('button', { type: 'button', class: 'cancel', onclick: () => cancelRun(entry) }, 'Cancel');
  const actions = el('div', { class: 'actions', hidden: true }, cancel);
  // A failed, cut-off, cancelled or interrupted run is retried as a new run linked to it.
  const retry = el('button', { type: 'button', class: 'retry', onclick: () => resend(entry.msgId, { role: s.role, retryOf: s.id }) }, 'Retry');
  const redo = el('div', { class: 'actions redo', hidden: true }, retry);
  const retried = ui.records.get(s.id)?.retryOf ? el('div', { class: 'retried' }, 'A retry of an earlier run (‹ › above shows it).') : null;
  entry.card = el('div', { class: 'run', 'data-run': s.id, 'data-role': s.role },
    el('div', { class: 'run-head' }, statusEl, detail), retried, tools, approval, decisions, error, files, notSaved, actions, redo);
  entry.parts = { statusEl, detail, tools, approval, cmd, desc, allow, deny, decisions, error, files, notSaved, actions, cancel, redo };
  const body = el('div', { class: 'body' });
  const regen = regenerateTools(entry);
  entry.parts.regen = regen;
  entry.answer = el('div', { class: 'msg assistant', hidden: true }, body, messageTools(() => entry.state.text || entry.stored || '', regen));
  entry.view = new StreamView(body);
}

function drawRun(entry) {
  const s = entry.state, p = entry.parts, card = entry.card;
  const terminal = TERMINAL.has(s.status);
  const { label, cls, detail } = statusLine(s);
  setText(p.statusEl, label);
  if (p.statusEl.className !== 'status ' + cls) p.statusEl.className = 'status ' + cls;
  setText(p.detail, detail ? ' · ' + detail : '');
  card.hidden = !needsCard(s, Date.now() - entry.firstDraw);

  // Tools: new ones are appended, finished ones updated in place.
  const items = p.tools.children;
  for (let i = 0; i < s.tools.length; i++) {
    const t = s.tools[i];
    const text = `${t.done ? (t.error ? '✗' : '✓') : '…'} ${t.tool}${t.preview ? ': ' + t.preview : ''}`;
    if (i >= items.length) p.tools.append(el('li', {}, text)); else setText(items[i], text);
  }
  p.tools.hidden = s.tools.length === 0;

  // Approval: live buttons only while the run is really waiting on this person.
  const ask = !terminal && !s.cancelling && s.approval;
  p.approval.hidden = !ask;
  if (ask && entry.seen.approvalId !== s.approval.requestId) {
    entry.seen.approvalId = s.approval.requestId;
    setText(p.cmd, s.approval.command || '');
    setText(p.desc, s.approval.description ? tidy(s.approval.description) : '');
    p.allow.disabled = p.deny.disabled = false;
    requestAnimationFrame(() => p.approval.scrollIntoView({ block: 'nearest' }));
  }
  while (p.decisions.children.length < s.decisions.length) {
    const d = s.decisions[p.decisions.children.length];
    p.decisions.append(el('li', { class: d.reason ? 'expired' : d.choice === 'deny' ? 'denied' : 'allowed' },
      ...decisionWords(d).map((w) => (typeof w === 'string' ? w : el('code', {}, w.code)))));
  }
  p.decisions.hidden = s.decisions.length === 0;

  const err = terminal && s.status !== 'completed' ? runErrorText(s.error, s.status) : '';
  setText(p.error, s.status === 'cancelled' && !s.error ? 'You cancelled this run.' : err);
  p.error.hidden = !p.error.textContent;

  while (p.files.children.length - 1 < s.artifacts.length) {
    const f = s.artifacts[p.files.children.length - 1];
    p.files.append(el('button', { type: 'button', class: 'file', 'data-artifact': f.id, onclick: () => downloadArtifact(f) },
      `${f.filename} (${fmtSize(f.size)})`));
  }
  p.files.hidden = s.artifacts.length === 0;
  // Files not saved and writes that failed, with why (the terminal event's skippedArtifacts).
  while (p.notSaved.children.length < s.notSaved.length) {
    const f = s.notSaved[p.notSaved.children.length];
    p.notSaved.append(el('li', {}, `Not saved: ${f.name}${f.reason ? ' — ' + f.reason : ''}`));
  }
  p.notSaved.hidden = s.notSaved.length === 0;

  p.actions.hidden = terminal || s.cancelling;
  const known = !!entry.msgId && !!ui.tree?.byId.has(entry.msgId);
  p.redo.hidden = !(terminal && ['failed', 'cancelled', 'interrupted'].includes(s.status) && known);
  for (const c of p.regen) c.hidden = !terminal || !known;
  // A message written while this answer streamed waited for it (kept in order): send it now.
  if (terminal && ui.pending?.waitFor === s.id) { ui.pending.waitFor = null; sendPending(); }
  if (s.authExpired) showAuth('Your session expired. Sign in again; your draft is kept.');

  // The answer: streamed into stable nodes; the stored answer once the run is settled.
  const text = s.text || entry.stored || '';
  if (text) {
    entry.answer.hidden = false;
    const body = entry.view.body;
    if (terminal && (s.done || !entry.follower)) {
      if (!entry.view.finished || entry.view.text !== text) entry.view.finish(text);
      body.removeAttribute('aria-live');
      body.removeAttribute('aria-busy');
    } else {
      if (!body.hasAttribute('aria-live')) { body.setAttribute('aria-live', 'polite'); body.setAttribute('aria-busy', 'true'); }
      entry.view.set(text);
    }
  }
  updateComposer();
  updateNet();
  scrollToEnd();
}

// The event stream carries phase, queue position and progress (run.status). A live run
// that has been quiet for 25 s has its record read (at most every 25 s) for the worker's
// heartbeat, so silence is reported only when there is silence: from the stream service
// (through the function only while it is unreachable), so watching costs no function
// execution.
const QUIET_MS = 25000;
setInterval(async () => {
  const now = Date.now();
  for (const entry of ui.runs.values()) {
    const s = entry.state;
    if (TERMINAL.has(s.status)) continue;
    if (now - s.lastSignAt < QUIET_MS || now - (entry.readAt || 0) < QUIET_MS) continue;
    entry.readAt = now;
    try {
      const r = await api.runRecord(s.id);
      if (r.heartbeatAt && r.heartbeatAt !== s.heartbeatAt) s.lastSignAt = Date.now();
      Object.assign(s, { phase: r.phase ?? s.phase, queueReason: r.queueReason, queuePosition: r.queuePosition,
        heartbeatAt: r.heartbeatAt, startedAt: r.startedAt, queuedAt: r.queuedAt, progress: r.progress });
      if (r.cancelRequested && !TERMINAL.has(s.status)) s.cancelling = true;
      drawRun(entry);
    } catch { /* the follower reports connectivity */ }
  }
}, 10000);

// A run that settled while followed has its tokens from the terminal event; the model the
// gateway served is on the record only: read it once.
async function modelServed(entry) {
  const s = entry.state;
  if (!TERMINAL.has(s.status) || !s.usage || s.usage.model) return;
  try {
    const r = await api.runRecord(s.id);
    if (r.usage) { s.usage = r.usage; drawRun(entry); }
  } catch { /* the card keeps the tokens */ }
}

function fmtSize(n) { return n > 1 << 20 ? (n / (1 << 20)).toFixed(1) + ' MiB' : n > 1024 ? Math.round(n / 1024) + ' KiB' : n + ' B'; }

async function decide(entry, choice) {
  const s = entry.state;
  if (!s.approval) return;
  const a = s.approval;
  entry.parts.allow.disabled = entry.parts.deny.disabled = true;
  try {
    await api.approve(s.id, a.requestId, choice);
    if (s.approval && s.approval.requestId === a.requestId) {
      s.approval = null;
      if (!s.decisions.some((x) => x.requestId === a.requestId)) s.decisions.push({ requestId: a.requestId, choice, command: a.command });
    }
    drawRun(entry);
  } catch (e) {
    entry.parts.allow.disabled = entry.parts.deny.disabled = false;
    showError('chat-error', e);
  }
}

async function cancelRun(entry) {
  try {
    const r = await api.cancel(entry.state.id);
    entry.state.cancelling = !TERMINAL.has(r.status);
    if (TERMINAL.has(r.status)) entry.state.status = r.status;
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

// --- scrolling ---------------------------------------------------------------------------
const box = $('messages');
function nearBottom() { return box.scrollHeight - box.scrollTop - box.clientHeight < 60; }
let scrollQueued = false;
function scrollToEnd(force = false) {
  if (force) { ui.stick = true; ui.autoTop = 0; }
  if (scrollQueued) return;
  scrollQueued = true;
  requestAnimationFrame(() => {
    scrollQueued = false;
    // Scrolled up since the last automatic scroll (the scroll event may not have run yet);
    // a scrollTop clamped by shrinking content is still at the bottom.
    const atMax = box.scrollHeight - box.clientHeight - box.scrollTop < 2;
    if (ui.stick && !atMax && box.scrollTop + 2 < ui.autoTop) ui.stick = false;
    if (ui.stick) { box.scrollTop = box.scrollHeight; ui.autoTop = box.scrollTop; }
    $('jump').hidden = ui.stick || nearBottom();
  });
}
box.addEventListener('scroll', () => {
  // Our own scroll, seen after more of the answer arrived (the event runs later, when the
  // content may already be taller): still following. Only a move up from where we last put
  // it is the reader's, and stops following; reaching the bottom again resumes it.
  if (ui.stick && box.scrollTop + 2 >= ui.autoTop) { $('jump').hidden = true; return; }
  ui.stick = nearBottom();
  ui.autoTop = ui.stick ? box.scrollTop : Infinity;
  if (ui.stick) $('jump').hidden = true;
}, { passive: true });
$('jump').addEventListener('click', () => { scrollToEnd(true); $('draft').focus(); });

// --- sending ---------------------------------------------------------------------------
$('draft').addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing && !ev.altKey && !ev.ctrlKey && !ev.metaKey) {
    ev.preventDefault();
    $('composer').requestSubmit();
  } else if (ev.key === 'ArrowUp' && !$('draft').value && !ev.shiftKey && !ev.altKey && !ev.ctrlKey && !ev.metaKey && ui.path.length) {
    ev.preventDefault(); // ArrowUp in an empty box edits the last message
    startEdit(ui.path[ui.path.length - 1]);
  } else if (ev.key === 'Escape' && ui.editing) {
    ev.preventDefault();
    ev.stopPropagation();
    cancelEdit();
  }
});

// The message limit (runes, as the server counts them) is shown before it is reached.
const LIMIT = 16384;
function updateCounter() {
  const n = [...$('draft').value].length;
  const c = $('counter');
  c.hidden = n < LIMIT * 0.8;
  setText(c, n > LIMIT ? `${n.toLocaleString('en')} / ${LIMIT.toLocaleString('en')}: ${(n - LIMIT).toLocaleString('en')} too many` : `${n.toLocaleString('en')} / ${LIMIT.toLocaleString('en')}`);
  c.classList.toggle('bad', n > LIMIT);
  return n <= LIMIT;
}
// The "too long" refusal goes once the message fits again (it stayed after the text was cut).
$('draft').addEventListener('input', () => { if (updateCounter() && $('composer-status').dataset.tooLong) setComposerStatus(''); });

// Shortcuts (listed in the help dialog, dialog.js).
function lastAnswerText() {
  const a = [...$('messages').querySelectorAll('.msg.assistant:not([hidden])')].pop();
  if (!a) return '';
  for (const e of ui.runs.values()) if (e.answer === a) return e.state.text || e.stored || '';
  return a.querySelector('.body')?.innerText || '';
}
document.addEventListener('keydown', (ev) => {
  if ($('app').hidden || document.querySelector('dialog[open]')) return;
  const mod = ev.ctrlKey || ev.metaKey;
  const inField = /^(INPUT|TEXTAREA|SELECT)$/.test(document.activeElement?.tagName || '');
  const k = ev.key.toLowerCase();
  if (mod && ev.shiftKey && k === 'o') { ev.preventDefault(); newConversation(); }
  else if (mod && !ev.shiftKey && k === 'k') { ev.preventDefault(); setSidebar(true); $('conv-search').focus(); $('conv-search').select(); }
  else if (mod && ev.shiftKey && k === 'c') { ev.preventDefault(); const t = lastAnswerText(); if (t) copyText(t).then((ok) => setComposerStatus(ok ? 'Copied the last answer.' : 'Could not copy.', !ok)); }
  else if (ev.key === 'Escape' && !ui.editing && !$('sidebar').classList.contains('open') && liveRun()) { ev.preventDefault(); cancelRun(liveRun()); }
  else if (ev.key === '?' && !inField && !mod) { ev.preventDefault(); helpDialog(); }
});
$('help').addEventListener('click', () => helpDialog());

// --- export -----------------------------------------------------------------------------
async function exportConversation(kind) {
  const id = ui.conv;
  if (!id) return;
  try {
    const arts = await api.listArtifacts({ conversationId: id });
    const byRun = new Map();
    for (const a of arts.artifacts || []) { if (!byRun.has(a.runId)) byRun.set(a.runId, []); byRun.get(a.runId).push(a); }
    const runOf = new Map([...ui.records.values()].map((r) => [r.messageId, r]));
    for (const e of ui.runs.values()) if (e.msgId) runOf.set(e.msgId, { ...(runOf.get(e.msgId) || {}), id: e.state.id, role: e.state.role, status: e.state.status, error: e.state.error });
    const answers = new Map((ui.msgs || []).filter((m) => m.role === 'assistant' && m.runId).map((m) => [m.runId, m.text]));
    const turns = ui.path.map((u) => {
      const r = runOf.get(u.id);
      const live = r && ui.runs.get(r.id);
      return { user: u, versions: ui.tree ? branchVersions(ui.tree, u.id).count : 1, run: r || null,
        answer: r ? (live?.state.text || live?.stored || answers.get(r.id) || null) : null, artifacts: r ? byRun.get(r.id) || [] : [] };
    });
    const doc = exportJSON({ conversation: { id, title: ui.convs.get(id)?.title || 'Conversation' }, turns });
    const text = kind === 'json' ? JSON.stringify(doc, null, 2) : exportMarkdown(doc);
    const blob = new Blob([text], { type: kind === 'json' ? 'application/json' : 'text/markdown' });
    const url = URL.createObjectURL(blob);
    const a = el('a', { href: url, download: fileName(doc.conversation.title, kind === 'json' ? 'json' : 'md') });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
  } catch (e) { showError('chat-error', e); }
}
$('export-md').addEventListener('click', () => exportConversation('md'));
$('export-json').addEventListener('click', () => exportConversation('json'));

$('composer').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  if (ui.pending) { retryNow(); return; }
  if (ui.attaching) return;
  const text = $('draft').value;
  if (!updateCounter()) {
    setComposerStatus(`The message is too long: at most ${LIMIT.toLocaleString('en')} characters. Attach long text as a file instead.`, true);
    $('composer-status').dataset.tooLong = '1';
    return;
  }
  if (!text.trim()) {
    if (attach.count) setComposerStatus('Write a message to go with the files.', true);
    $('draft').focus();
    return;
  }
  let attachments = [];
  if (attach.count) {
    // The message names its files by id: every upload must have finished.
    ui.attaching = true;
    if (attach.busy()) setComposerStatus('Waiting for the files to finish uploading…');
    try { attachments = await attach.ready(); } catch (e) { setComposerStatus(e.message, true); return; } finally { ui.attaching = false; }
    if (ui.pending) return;
  }
  // The requestId is fixed before the first try, so a retry can never double the message.
  // A new message follows the last one shown; an edit is a sibling of the one it replaces.
  const ed = ui.editing;
  const last = ui.path[ui.path.length - 1];
  ui.pending = { requestId: newRequestId(), text, role: $('role').value, conv: ui.conv, title: ui.conv ? null : titleFrom(text),
    attachments: ed ? [...ed.attachments, ...attachments] : attachments, parentId: ed ? ed.parentId : last?.id, branch: !!ed };
  // Sent while a chat answer is being written here: it waits for that answer, so the two
  // stay in order and the new one sees the first (Send now sends it at once). Jobs run in
  // the background and are not waited for.
  try { sessionStorage.setItem('pa-pending', JSON.stringify(ui.pending)); } catch { /* kept in memory */ }
  const live = liveRun();
  if (!ed && live && ui.conv && live.state.role === 'chat' && live.state.status !== 'waiting_for_approval') {
    ui.pending.waitFor = live.state.id;
    setComposerStatus('Your message is sent when the answer being written finishes.');
    setText($('send'), 'Send now');
    return;
  }
  ui.sendTry = 0;
  try { sessionStorage.setItem('pa-pending', JSON.stringify(ui.pending)); } catch { /* kept in memory */ }
  await sendPending();
});

function retryNow() {
  clearTimeout(ui.sendTimer);
  if (ui.pending) ui.pending.waitFor = null;
  sendPending();
}

/** joinPath adds a message that follows the one shown last to the tree and the path. */
function joinPath(m) {
  ui.msgs = [...(ui.msgs || []).filter((x) => x.id !== m.id), m];
  ui.tree = branchTree(ui.msgs);
  if (!ui.path.some((x) => x.id === m.id)) ui.path.push(ui.tree.byId.get(m.id));
}

function setComposerStatus(text, bad = false) { setText($('composer-status'), text); $('composer-status').classList.toggle('bad', bad); delete $('composer-status').dataset.tooLong; }

async function sendPending() {
  const p = ui.pending;
  if (!p || p.inFlight || p.waitFor) return;
  clearTimeout(ui.sendTimer);
  p.inFlight = true;
  $('chat-error').textContent = '';
  $('send').disabled = true;
  setText($('send'), 'Sending…');
  setComposerStatus(ui.sendTry ? 'Sending again…' : 'Sending…');
  try {
    if (!p.conv) {
      // A new conversation, titled from its first message; the requestId makes a retry safe.
      const c = await api.createConversation(p.title || titleFrom(p.text), p.requestId);
      addConversation(c, true);
      p.conv = c.id;
      try { sessionStorage.setItem('pa-pending', JSON.stringify(p)); } catch { /* kept in memory */ }
      if (ui.conv === null) {
        ui.conv = c.id;
        showInAddress(c.id);
        for (const b of $('conversations').querySelectorAll('button.conv')) b.classList.toggle('active', b.dataset.id === c.id);
      }
    }
    const res = await api.sendMessage(p.conv, p);
    ui.pending = null;
    try { sessionStorage.removeItem('pa-pending'); } catch { /* nothing kept */ }
    if (!p.tool) { // a regeneration or retry leaves what is being written alone
      $('draft').value = '';
      updateCounter();
      if (p.attachments?.length) attach.clear();
    }
    setComposerStatus('');
    if (p.branch) {
      // An edit, regeneration or retry: the new version is shown with its branch.
      ui.editing = null;
      $('composer').classList.remove('editing');
      if (p.conv === ui.conv) await openConversation(p.conv);
    } else if (p.conv === ui.conv) {
      $('messages').querySelector('.empty')?.remove();
      const mine = { id: res.messageId, role: 'user', text: p.text, sequence: res.sequence, attachments: p.attachments, parentId: p.parentId, runId: res.runId };
      joinPath(mine);
      if (!ui.msgIds.has(res.messageId)) $('messages').append(messageEl(mine));
      if (!ui.runs.has(res.runId)) addRun({ id: res.runId, status: res.status, role: p.role, messageId: res.messageId }, { live: true });
      scrollToEnd(true);
    }
  } catch (e) {
    p.inFlight = false;
    if (e instanceof ApiError && e.status === 401) { setComposerStatus(''); return showAuth('Your session expired. Sign in again; your draft is kept.'); }
    const retryable = e instanceof NetworkError || (e instanceof ApiError && (e.status >= 500 || e.status === 429));
    if (!retryable) {
      ui.pending = null;
      try { sessionStorage.removeItem('pa-pending'); } catch { /* nothing kept */ }
      setComposerStatus('');
      showError('chat-error', e);
    } else {
      ui.sendTry++;
      const wait = e instanceof ApiError && e.retryAfter ? e.retryAfter : Math.min(2 ** ui.sendTry, 30);
      setComposerStatus(`${errorText(e)} Your message is kept and will be sent automatically (next try in ${wait} s).`);
      ui.sendTimer = setTimeout(() => { if (ui.pending === p) sendPending(); }, wait * 1000);
      $('send').disabled = false;
      setText($('send'), 'Retry now');
      return;
    }
  } finally {
    p.inFlight = false;
    if (!ui.pending) { $('send').disabled = false; setText($('send'), 'Send'); }
  }
}
window.addEventListener('online', () => { if (ui.pending) retryNow(); });

// Attaching: the Attach button opens the file picker; files dropped on the composer or
// pasted into the draft join the same list.
$('attach').addEventListener('click', () => $('file-input').click());
$('file-input').addEventListener('change', (ev) => { attach.add(ev.target.files); ev.target.value = ''; $('draft').focus(); });
const hasFiles = (ev) => [...(ev.dataTransfer?.types || [])].includes('Files');
$('composer').addEventListener('dragover', (ev) => { if (!hasFiles(ev)) return; ev.preventDefault(); ev.dataTransfer.dropEffect = 'copy'; $('composer').classList.add('dropping'); });
$('composer').addEventListener('dragleave', (ev) => { if (!$('composer').contains(ev.relatedTarget)) $('composer').classList.remove('dropping'); });
$('composer').addEventListener('drop', (ev) => {
  $('composer').classList.remove('dropping');
  if (!ev.dataTransfer?.files?.length) return;
  ev.preventDefault();
  attach.add(ev.dataTransfer.files);
});
$('draft').addEventListener('paste', (ev) => {
  const files = ev.clipboardData?.files;
  if (!files?.length) return; // text pastes as text
  ev.preventDefault();
  attach.add(files);
});

// The composer's Stop button cancels the run that is streaming in this conversation.
function liveRun() {
  let last = null;
  for (const e of ui.runs.values()) if (!TERMINAL.has(e.state.status) && !e.state.cancelling) last = e;
  return last;
}
function updateComposer() {
  const live = liveRun();
  $('stop').hidden = !live;
}
$('stop').addEventListener('click', () => { const e = liveRun(); if (e) cancelRun(e); });

// --- connectivity -----------------------------------------------------------------------
// A request that goes unanswered longer than it should (a frozen server) triggers a quick
// health check, so the offline state shows within seconds, not after the long-poll ends.
let probing = false;
let lastProbe = 0;
async function probe() {
  if (probing || Date.now() - lastProbe < 3000) return;
  probing = true;
  lastProbe = Date.now();
  const ok = await api.health(3000);
  probing = false;
  if (ui.serverDown !== !ok) { ui.serverDown = !ok; updateNet(); }
}
setInterval(() => {
  if ($('app').hidden) return;
  if (api.oldestOverdue() > 3000 || ui.serverDown) probe();
}, 1000);
window.addEventListener('offline', () => { ui.serverDown = true; updateNet(); });
window.addEventListener('online', () => { lastProbe = 0; probe(); });

function updateNet() {
  const followersOffline = [...ui.runs.values()].some((r) => r.state.offline);
  const down = ui.serverDown || followersOffline || navigator.onLine === false;
  const net = $('net');
  net.hidden = !down;
  showNote($('live-note'), $('app').hidden ? '' : liveNote([ui.feed?.status(), ...[...ui.runs.values()].map((r) => (r.follower && !r.state.done ? r.state : null))]));
  setText(net, navigator.onLine === false ? 'You are offline. Reconnecting when the network is back…' : 'The server is not answering. Retrying…');
}

// --- system status ------------------------------------------------------------------------
// The panel's state comes with the change feed from the stream service (pushed within a
// second of a change; no function execution). Only while the stream service is
// unreachable (the feed falls back) is GET /api/system read: every 15 s while seen.
function renderSystem(s) {
  const boxEl = $('system');
  const devices = s.devices || [];
  const state = new Map(devices.map((d) => [d.device, d]));
  const rows = devices.map((d) => el('div', { class: 'dev' + (d.stale ? ' unknown' : ''), 'data-device': d.device, 'data-state': d.stale ? 'unknown' : d.state },
    el('strong', {}, d.device), `: ${d.stale ? 'no recent report (state unknown)' : d.state}`,
    el('br'), d.stale ? '' : `model ${d.activeModel || d.loadedModel || 'none loaded'}`));
  if (s.queues) {
    for (const q of s.queues) {
      const dev = state.get(q.name.replace(/^gpu:/, ''));
      const words = [];
      // Waiting: not taken yet, or taken and waiting for the device (as their cards say).
      const waiting = (q.pending || 0) + (q.waiting || 0);
      if (waiting) words.push(`${waiting} waiting`);
      // A queue's "active" count can include work already finished; trust an idle device.
      if (q.active && !(dev && !dev.stale && dev.state === 'idle')) words.push(`${q.active} running`);
      if (q.approval) words.push(`${q.approval} waiting for approval`);
      if (q.paused) words.push('paused');
      rows.push(el('div', { class: 'queue', 'data-queue': q.name }, `${q.name.replace(/^gpu:/, '')} queue: ${words.join(', ') || 'nothing waiting'}`));
    }
  } else {
    rows.push(el('div', { class: 'unknown' }, 'Queue status is unavailable right now.'));
  }
  if (!devices.length && s.queues) rows.unshift(el('div', {}, 'No GPU has reported yet.'));
  else if (!devices.length && !s.queues) rows.splice(0, rows.length, el('div', { class: 'unknown' }, 'Status unavailable: the server cannot read the work queue right now.'));
  boxEl.replaceChildren(...rows);
}
async function refreshSystem() {
  try {
    renderSystem(await api.system());
  } catch (e) {
    $('system').replaceChildren(el('div', { class: 'unknown' }, e instanceof NetworkError ? 'Status unavailable: the server is not answering.' : 'Status unavailable right now.'));
  }
}
const systemByFunction = () => !$('app').hidden && !document.hidden && !!ui.feed?.status().fallback;
setInterval(() => { if (systemByFunction()) refreshSystem(); }, 15000);
document.addEventListener('visibilitychange', () => { if (systemByFunction()) refreshSystem(); });
function onFeedStatus(st) {
  if (st.fallback && !ui.systemFallback && !$('app').hidden) refreshSystem(); // at once when the stream goes
  ui.systemFallback = st.fallback;
  updateNet();
}

// --- start ---------------------------------------------------------------------------------
(async () => {
  try {
    const saved = sessionStorage.getItem('pa-pending');
    if (saved) { ui.pending = JSON.parse(saved); ui.pending.inFlight = false; ui.pending.waitFor = null; $('draft').value = ui.pending.text; }
  } catch { /* nothing kept */ }
  if ('serviceWorker' in navigator) navigator.serviceWorker.register('/sw.js').catch(() => {});
  if (invitation) {
    // An invitation is for a new account: leave any session in this browser first.
    if (await auth.current().catch(() => null)) await auth.signOut();
    showAuth();
  } else await signedInOrWait();
})();

/**
 * signedInOrWait enters the app when Appwrite confirms the session. When it cannot be
 * reached (offline, a restart), the browser stays signed in: the page says so and asks
 * again when the connection is back (and every 10 s), never sends the person to sign in.
 */
async function signedInOrWait() {
  let user;
  try {
    user = await auth.current();
  } catch (e) {
    if (!(e instanceof Unreachable)) throw e;
    showAuth('The server cannot be reached right now. You are still signed in: this page continues by itself when it answers again.');
    $('auth-form').hidden = true;
    const again = () => { clearInterval(timer); window.removeEventListener('online', again); signedInOrWait(); };
    const timer = setInterval(again, 10000);
    window.addEventListener('online', again);
    return;
  }
  if (user) await enter().catch((e) => { $('app').hidden = false; $('signout').hidden = false; showError('chat-error', e); });
  else showAuth();
}
