// The admin console: the same admin API the CLI uses (`pa admin …`), for accounts with the
// admin label. Loaded only for them; the server checks every call anyway. Sections, in
// plain words (no API paths or internal names in sentences): alerts (a harness in use whose
// latest check failed), people (every account with Admit / Make administrator / Make member
// / Remove, the waiting invitations with Revoke, Create invitation), devices, harness
// profiles and model routes as forms checked as typed (JSON under "Advanced"; preview, then
// save against the previewed revision; each route's GPU qualification and Qualify with its
// progress polled), which harness and route each kind of work uses (a form; preview: what
// changes, which runs stay pinned), and the history of changes including member actions.
import { ApiError } from './api.js';

const KIND_WORDS = { harness: 'The harness', route: 'The model route', selection: 'The choice of harness and route per kind of work' };
const HARNESS_FIELDS = ['profileId', 'kind', 'baseUrl', 'profileName', 'keyRef'];
const ROUTE_FIELDS = ['routeId', 'alias', 'device', 'backendModel', 'contextBudget', 'maxOutput', 'localOnly', 'enabled'];

/** latest keeps the highest revision of each id. */
function latest(list, idField) {
  const by = new Map();
  for (const r of list || []) if (!by.has(r[idField]) || by.get(r[idField]).revision < r.revision) by.set(r[idField], r);
  return [...by.values()].sort((a, b) => String(a[idField]).localeCompare(String(b[idField])));
}

// The forms: each field in words, checked as it is typed (the server checks again).
const NAME_RULE = (v) => (/^[A-Za-z0-9_-]{1,30}$/.test(v) ? '' : 'Use 1 to 30 letters, digits, - or _.');
const REQUIRED = (v) => (String(v ?? '').trim() ? '' : 'Required.');
export const HARNESS_FORM = [
  { name: 'profileId', label: 'Name', check: NAME_RULE },
  { name: 'kind', label: 'Kind', type: 'select', options: [['hermes', 'Hermes agent'], ['direct', 'Model server, no agent']] },
  { name: 'baseUrl', label: 'Address', check: (v) => (/^https?:\/\/[^\s/]+/.test(v) ? '' : 'An address starting with http:// or https://.') },
  { name: 'profileName', label: 'Hermes profile (optional)' },
  { name: 'keyRef', label: 'Where its key is kept (optional)', placeholder: 'env:NAME or file:/path', check: (v) => (!v || /^(env:[A-Za-z_][A-Za-z0-9_]*|file:\/.+)$/.test(v) ? '' : 'Write env:NAME or file:/path — never the key itself.') },
];
export const ROUTE_FORM = [
  { name: 'routeId', label: 'Name', check: NAME_RULE },
  { name: 'alias', label: 'Name the harness asks for', check: NAME_RULE },
  { name: 'device', label: 'GPU', check: REQUIRED },
  { name: 'backendModel', label: 'Model', check: REQUIRED },
  { name: 'contextBudget', label: 'Context budget (tokens)', type: 'number', check: (v) => (Number(v) > 0 ? '' : 'The measured context window, more than 0.') },
  { name: 'maxOutput', label: 'Longest answer (tokens)', type: 'number', check: (v) => (Number(v) >= 0 ? '' : 'Zero or more.') },
  { name: 'localOnly', label: 'Local models only', type: 'checkbox' },
  { name: 'enabled', label: 'In use', type: 'checkbox' },
];

/** formErrors: each field's problem ({} when the input is fine). */
export function formErrors(spec, input) {
  const out = {};
  for (const f of spec) {
    const msg = f.check ? f.check(input[f.name] ?? '') : '';
    if (msg) out[f.name] = msg;
  }
  return out;
}

const pick = (rec, fields) => Object.fromEntries(fields.filter((f) => rec[f] !== undefined && rec[f] !== null).map((f) => [f, rec[f]]));

// --- GPU qualification of a route (issue 20): pure wording, unit-tested in node -------------
const ACTIVE = new Set(['queued', 'waiting', 'running']);
const QUALIFY_POLL_MS = 3000;
const utc = (s) => { const d = new Date(s); return Number.isNaN(d.getTime()) ? String(s || '') : d.toISOString().slice(0, 16).replace('T', ' ') + ' UTC'; };
const mib = (b) => `${Math.round((Number(b) || 0) / 1048576).toLocaleString('en-US')} MiB`;
const num = (n, digits = 0) => (Number(n) || 0).toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

/** qualificationVerdict: a route's last qualification (a /api/system routes[] entry or GET
 * …/qualification) in one line: { state: passed|failed|never|stale|unknown, text }. */
export function qualificationVerdict(v) {
  const last = v?.last;
  if (!last) {
    if (v?.summary && v.summary !== 'never qualified') return { state: v.qualified ? 'passed' : 'unknown', text: v.summary };
    return { state: 'never', text: 'never qualified' };
  }
  if (last.device !== v.device || last.model !== v.model || Number(last.contextBudget) !== Number(v.contextBudget)) {
    return { state: 'stale', text: 'for another model or budget — qualify again' };
  }
  if (!last.passed) return { state: 'failed', text: `✗ failed${last.finishedAt ? ' ' + utc(last.finishedAt) : ''}: ${(last.reasons || [])[0] || v.reason || 'no reason recorded'}` };
  if (v.qualified === false) return { state: 'failed', text: `✗ not qualified: ${v.reason || 'unknown reason'}` };
  return { state: 'passed', text: `✓ passed ${utc(last.finishedAt)}` };
}

/** requestActive: the qualification request is still queued, waiting or running. */
export const requestActive = (req) => !!req && ACTIVE.has(req.state);

const STEP_WORDS = { load: 'step 1 of 5, load', fill: 'step 2 of 5, fill', generate: 'step 3 of 5, generate', slots: 'step 4 of 5, slots', thermal: 'step 5 of 5, thermal' };

/** requestLine: the latest request's progress in words ('' when none is kept). */
export function requestLine(req) {
  if (!req || !req.state) return '';
  const pos = req.position && Number(req.position) > 0 ? ` (position ${req.position})` : '';
  const why = req.reason ? `: ${req.reason}` : '';
  // The step it is at (load, fill, generate, slots, thermal), while it runs.
  const step = req.state === 'running' && req.step ? ` (${STEP_WORDS[req.step] || req.step})` : '';
  return ACTIVE.has(req.state) ? `Qualification ${req.state}${step}${pos}${why}` : `Last request ${req.state}${why}`;
}

/** qualificationFigures: the measured figures of a qualification as [label, value] rows
 * (peak temperature and power only when the device reported them). */
export function qualificationFigures(q) {
  if (!q) return [];
  const rows = [['Result', q.passed ? 'passed' : 'failed'], ['Finished', utc(q.finishedAt)],
    ['Model / budget', `${q.model} on ${q.device}, ${num(q.contextBudget)} tokens`],
    ['Context served / trained', `${num(q.contextServed)} / ${q.contextTrained ? num(q.contextTrained) : 'not reported'} tokens${q.contextSource ? ` (${q.contextSource})` : ''}`],
    ['Filled tokens', num(q.filledTokens)]];
  if (q.vramTotalBytes || q.vramIdleBytes || q.vramFullBytes) {
    rows.push(['VRAM idle / full / after / total', [q.vramIdleBytes, q.vramFullBytes, q.vramAfterBytes, q.vramTotalBytes].map(mib).join(' / ')]);
  }
  rows.push(['Prompt / generation', `${num(q.promptTokensPerSecond, 1)} / ${num(q.generationTokensPerSecond, 1)} tokens/s`]);
  if (q.concurrency) rows.push(['Concurrent', `${q.concurrency} requests, ${num(q.concurrentTokensPerSecond, 1)} tokens/s together`]);
  if (q.peakTemperatureC > 0) rows.push(['Peak temperature', `${num(q.peakTemperatureC)} °C`]);
  if (q.peakPowerW > 0) rows.push(['Peak power', `${num(q.peakPowerW)} W`]);
  const l = q.limits || {};
  const lim = [l.maxTemperatureC ? `≤ ${num(l.maxTemperatureC)} °C` : '', l.minFreeMemoryBytes ? `≥ ${mib(l.minFreeMemoryBytes)} free` : '',
    l.minPromptTokensPerSecond ? `prompt ≥ ${num(l.minPromptTokensPerSecond, 1)} tokens/s` : '',
    l.minGenerationTokensPerSecond ? `generation ≥ ${num(l.minGenerationTokensPerSecond, 1)} tokens/s` : ''].filter(Boolean);
  if (lim.length) rows.push(['Limits', lim.join(', ')]);
  if (!q.passed && q.reasons?.length) rows.push(['Reasons', q.reasons.join('; ')]);
  if (q.waitedSeconds > 0) rows.push(['Waited for the device', `${num(q.waitedSeconds)} s`]);
  return rows;
}

/** auditWords: an audit entry as a sentence (who did what), for the console. names maps
 * account ids to names or emails. */
export function auditWords(a, names = new Map()) {
  let d = {};
  try { d = JSON.parse(a.detail || '{}') || {}; } catch { d = {}; }
  const who = (id) => (String(id || '').startsWith('agent:') ? 'The agent' : names.get(id) || 'An administrator');
  const whom = d.email || names.get(String(a.target || '').split('/')[1]) || 'an account';
  const [kind, id] = String(a.target || '').split('/');
  const rev = a.toRevision != null ? ` (version ${a.toRevision})` : '';
  switch (a.action) {
    case 'invitation.create': return `${who(a.actorId)} created an invitation${d.expiresAt ? `, valid until ${new Date(d.expiresAt).toLocaleString()}` : ''}.`;
    case 'invitation.revoke': return `${who(a.actorId)} revoked an invitation.`;
    case 'invitation.redeem': return `${d.name || d.email || 'Someone'} signed up with an invitation${d.email ? ` as ${d.email}` : ''}.`;
    case 'member.create': return `${who(a.actorId)} created the account ${whom}.`;
    case 'member.admit': return `${who(a.actorId)} admitted ${whom}.`;
    case 'member.remove': return `${who(a.actorId)} removed ${whom}.`;
    case 'member.role': return `${who(a.actorId)} made ${whom} ${d.to === 'admin' ? 'an administrator' : 'a member'}.`;
    case 'harness.register': return `${who(a.actorId)} saved harness ${id}${rev}.`;
    case 'harness.validate.request': return `${who(a.actorId)} asked to check harness ${id}${rev}.`;
    case 'harness.validate': return `${who(a.actorId)} checked harness ${id}${rev}: ${d.verified ? 'it works' : `it failed${d.reason ? ` (${d.reason})` : ''}`}${d.keptVerified ? '; the roles using it keep working' : ''}.`;
    case 'route.register': return `${who(a.actorId)} saved model route ${id}${rev}.`;
    case 'selection.commit': return `${who(a.actorId)} changed which harness and route each kind of work uses${rev}.`;
    case 'release.propose': return `${who(a.actorId)} proposed configuration ${a.toRevision}.`;
    case 'release.evidence': return `Configuration ${a.toRevision} was checked: ${a.detail === 'ready' ? 'every check passed' : 'the checks failed'}.`;
    case 'release.approve': return `${who(a.actorId)} approved configuration ${a.toRevision}.`;
    case 'release.promote': return `${who(a.actorId)} made configuration ${d.release} live${d.environment ? ` in ${d.environment}` : ''}.`;
    case 'release.rollback': return `${who(a.actorId)} went back to configuration ${d.release}${d.environment ? ` in ${d.environment}` : ''}.`;
    case 'release.follow': return `${who(a.actorId)} made ${d.environment} run what everyone runs again.`;
    case 'bootstrap': return `The first configuration was installed${rev}.`;
    default: return `${who(a.actorId)}: ${a.action.replace(/[._]/g, ' ')} ${kind || ''} ${id || ''}${rev}.`.replace(/\s+/g, ' ');
  }
}

/** releaseState: a configuration release's state in words. */
export function releaseState(r, env = '') {
  if (env) {
    if ((r.liveIn || []).includes(env)) return `live in ${env}`;
    if (r.live) return (r.envs || []).includes(env) ? 'live for everyone else' : `live (${env} runs it too)`;
  }
  const also = (r.liveIn || []).length ? ` · live in ${r.liveIn.join(', ')}` : '';
  if (r.live) return `live${also}`;
  if (also) return `${r.promotedAt ? 'was live before' : 'checked'}${also}`;
  if (r.state === 'collecting') return 'being checked';
  if (r.state === 'failed') return 'its checks failed';
  return r.promotedAt ? 'was live before' : 'checked: ready to go live';
}

/** releaseChanges: a release's plan as sentences (no internal names). */
export function releaseChanges(r) {
  const out = [];
  const b = (x) => (x ? `harness ${x.harness} version ${x.harnessRevision}, model route ${x.route} version ${x.routeRevision}${Array.isArray(x.tools) ? `, tools: ${x.tools.length ? x.tools.join(', ') : 'none'}` : ', every allowed tool'}` : 'nothing');
  for (const c of r.plan?.changes || []) {
    if (c.field.startsWith('roles.')) {
      const role = c.field.slice(6);
      if (c.from == null) out.push(`New kind of work ${role}: ${b(c.to)}.`);
      else if (c.to == null) out.push(`${role} is removed.`);
      else out.push(`${role}: ${b(c.from)} → ${b(c.to)}.`);
    } else if (c.field === 'toolCeiling') out.push(`Tools allowed at all: ${(c.to || []).join(', ') || 'none'}.`);
  }
  if (!out.length) out.push(r.seq === 1 ? 'The first configuration.' : 'Nothing changes.');
  return out;
}

/** evidenceLines: what a release's checks found, as sentences. */
export function evidenceLines(e) {
  if (!e) return ['Not checked yet.'];
  const out = [e.passed ? 'Every check passed.' : e.waiting ? `Waiting: ${e.waiting}.` : 'The checks failed.'];
  for (const p of e.problems || []) out.push(`Problem: ${p}.`);
  for (const h of e.harnesses || []) out.push(`Harness ${h.id} version ${h.revision}: ${h.verified ? 'works' : 'not working'}${h.version ? `, Hermes ${h.version}` : ''}${h.commit ? ` (${h.commit})` : ''}.`);
  for (const r of e.routes || []) out.push(`Model route ${r.id} version ${r.revision}: ${r.model} on ${r.device}, ${num(r.contextBudget)} tokens; GPU qualification: ${r.qualification}.`);
  for (const p of e.probes || []) out.push(`Test run for ${p.role}: ${p.ok ? 'answered' : 'failed'} (${p.detail}).`);
  if (e.probeSkipped) out.push('No test run was made (none is set up here).');
  return out;
}

/** readinessLines: /api/system's readiness section (admins) in words: its summary, then
 * what each component not ready says (failing first, then unknown: read through one that fails). */
export function readinessLines(r) {
  if (!r) return { ready: null, lines: ['Readiness unknown: this server did not report it.'] };
  const cs = r.components || [];
  const pick = (state) => cs.filter((c) => c.state === state).map((c) => ({ name: c.name, state, text: c.message }));
  return { ready: !!r.ready, lines: [r.summary, ...pick('failing'), ...pick('unknown')] };
}

export function mountAdmin(root, api, { el, errorText, copyText }) {
  const status = (node, text, bad = false) => { node.textContent = text; node.classList.toggle('error', bad); };
  const fail = (node) => (e) => status(node, errorText(e), true);
  const section = (id, title, ...body) => el('section', { class: 'admin-card', id, 'aria-labelledby': id + '-h' }, el('h3', { id: id + '-h' }, title), ...body);

  // --- members and invitations ---------------------------------------------------------
  const invHours = el('input', { type: 'number', min: 1, max: 720, value: 72, 'aria-label': 'Invitation valid for (hours)' });
  const invOut = el('div', { class: 'admin-out', hidden: true });
  const invStatus = el('p', { class: 'admin-status', role: 'status' });
  const invite = async () => {
    status(invStatus, 'Creating…');
    try {
      const r = await api.json('POST', '/api/invitations', { body: { expiresInHours: Number(invHours.value) || 72 } });
      const link = `${location.origin}/#invite=${r.token}`;
      const field = el('input', { class: 'invite-link', readonly: true, value: link, 'aria-label': 'Invitation link' });
      const copy = el('button', { type: 'button', onclick: () => copyText(link, copy) }, 'Copy link');
      invOut.replaceChildren(field, copy, el('p', { class: 'note' }, `Single use; valid until ${new Date(r.expiresAt).toLocaleString()}. Send it privately.`));
      invOut.hidden = false;
      status(invStatus, '');
    } catch (e) { fail(invStatus)(e); }
  };
  // The people: every account (Admit, Make admin / Make member, Remove), the pending
  // invitations (Revoke). Your own row has no buttons: another admin changes your role.
  const people = el('ul', { class: 'admin-list people' });
  const pendingList = el('ul', { class: 'admin-list invitations' });
  const memStatus = el('p', { class: 'admin-status people-status', role: 'status' });
  const names = new Map(); // account id → name or email (the audit says who)
  let me = '';
  const day = (s) => { const d = new Date(s); return Number.isNaN(d.getTime()) ? '' : d.toLocaleDateString(); };
  const ROLE_WORDS = { admin: 'administrator', member: 'member', none: 'signed up, not admitted yet' };
  const act = (label, cls, run) => {
    const b = el('button', { type: 'button', class: cls }, label);
    b.addEventListener('click', async () => {
      b.disabled = true;
      try { status(memStatus, await run()); await loadPeople(); await loadAudit(); } catch (e) { b.disabled = false; fail(memStatus)(e); }
    });
    return b;
  };
  const setRole = (m, body, done) => act(done.label, done.cls, async () => {
    await api.json('PUT', `/api/members/${encodeURIComponent(m.id)}`, { body });
    return `${m.name || m.email} ${done.said}.`;
  });
  // Forget: everything of theirs goes (conversations, files, their agent's home, the
  // account), confirmed by typing their email (POST /api/members/{id}/forget).
  const forget = (m, li) => {
    const b = el('button', { type: 'button', class: 'forget' }, 'Forget…');
    b.addEventListener('click', () => {
      const who = m.name || m.email;
      const email = el('input', { type: 'email', class: 'forget-email', autocomplete: 'off', 'aria-label': `Type ${who}'s email to confirm` });
      const go = el('button', { type: 'button', class: 'forget-confirm danger' }, 'Forget for good');
      const keep = el('button', { type: 'button', class: 'forget-keep' }, 'Keep');
      const box = el('div', { class: 'forget-box', role: 'group', 'aria-label': `Forget ${who}` },
        el('p', { class: 'note' }, `This deletes ${who}'s account, every conversation, file and artifact of theirs, and their agent's memory and work folder on every GPU host. It cannot be undone. Type their email to confirm.`),
        email, ' ', go, ' ', keep);
      keep.addEventListener('click', () => { box.remove(); b.hidden = false; b.focus(); });
      go.addEventListener('click', async () => {
        go.disabled = true;
        try {
          const r = await api.json('POST', `/api/members/${encodeURIComponent(m.id)}/forget`, { body: { email: email.value.trim() } });
          status(memStatus, `${who} was forgotten: ${r.deletedConversations} conversation${r.deletedConversations === 1 ? '' : 's'} deleted; their agent's home is being removed on every GPU host.`);
          await loadPeople(); await loadAudit();
        } catch (e) { go.disabled = false; fail(memStatus)(e); }
      });
      b.hidden = true;
      li.append(box);
      email.focus();
    });
    return b;
  };
  const loadPeople = async () => {
    try {
      if (!me) me = (await api.json('GET', '/api/me')).id || '';
      const [ms, inv] = await Promise.all([api.json('GET', '/api/members'), api.json('GET', '/api/invitations')]);
      for (const m of ms.members || []) names.set(m.id, m.name || m.email);
      people.replaceChildren(...(ms.members || []).map((m) => {
        const li = el('li', { 'data-member': m.id, 'data-role': m.role },
          el('strong', {}, m.name || m.email), m.name ? ` · ${m.email}` : '', ` · ${ROLE_WORDS[m.role] || m.role}`,
          m.joinedAt ? ` · joined ${day(m.joinedAt)}` : '', m.invitedBy ? ` · invited by ${m.invitedBy}` : '');
        if (m.id === me) { li.append(' · you'); return li; }
        const bs = [];
        if (m.role === 'none') bs.push(setRole(m, { member: true }, { label: 'Admit', cls: 'admit', said: 'can use the assistant now' }));
        if (m.role === 'member') bs.push(setRole(m, { role: 'admin' }, { label: 'Make administrator', cls: 'make-admin', said: 'is an administrator now' }));
        if (m.role === 'admin') bs.push(setRole(m, { role: 'member' }, { label: 'Make member', cls: 'make-member', said: 'is a member now (no longer an administrator)' }));
        if (m.role !== 'none') bs.push(setRole(m, { member: false }, { label: 'Remove', cls: 'remove', said: 'can no longer use the assistant' }));
        bs.push(forget(m, li));
        for (const b of bs) li.append(' ', b);
        return li;
      }));
      pendingList.replaceChildren(...(inv.invitations || []).map((i) => el('li', { 'data-invitation': i.id },
        `Invited by ${i.invitedBy} on ${new Date(i.invitedAt).toLocaleString()} · valid until ${new Date(i.expiresAt).toLocaleString()} `,
        act('Revoke', 'revoke', async () => {
          await api.raw('DELETE', `/api/invitations/${encodeURIComponent(i.id)}`);
          return 'Invitation revoked: its link no longer works.';
        }))));
      if (!(inv.invitations || []).length) pendingList.replaceChildren(el('li', { class: 'note' }, 'No invitation is waiting to be used.'));
    } catch (e) { fail(memStatus)(e); }
  };
  const members = section('admin-members', 'Members and invitations',
    el('div', { class: 'admin-row' }, el('label', {}, 'Valid for (hours) ', invHours), el('button', { type: 'button', class: 'invite', onclick: async () => { await invite(); await loadPeople(); } }, 'Create invitation')),
    invOut, invStatus,
    el('h4', {}, 'Waiting invitations'), pendingList,
    el('h4', {}, 'People'), people, memStatus);

  // --- devices ---------------------------------------------------------------------------
  const alerts = el('div', { class: 'admin-alerts', role: 'alert', hidden: true });
  const devList = el('ul', { class: 'admin-list devices' });
  const readiness = el('div', { class: 'admin-readiness', 'aria-label': 'Readiness per component' });
  const devStatus = el('p', { class: 'admin-status', role: 'status' });
  const loadDevices = async () => {
    try {
      const s = await api.json('GET', '/api/system');
      // Readiness per component: the summary, then each failing (or unknown) component's sentence.
      const rl = readinessLines(s.readiness);
      readiness.replaceChildren(...rl.lines.map((l) => typeof l === 'string'
        ? el('p', { class: rl.ready ? 'note' : 'warning' }, l)
        : el('p', { class: l.state === 'failing' ? 'warning' : 'note', 'data-component': l.name, 'data-state': l.state }, l.text)));
      // Something in use needs the admin (a harness whose latest check failed: its roles keep working).
      const al = s.alerts || [];
      alerts.replaceChildren(...al.map((a) => el('p', { class: 'warning', 'data-alert': a.kind }, '⚠ ', a.message)));
      alerts.hidden = !al.length;
      const items = (s.devices || []).map((d) => {
        const li = el('li', { 'data-device': d.device },
          el('strong', {}, d.device), ` — ${d.state}`, d.loadedModel ? ` · model ${d.loadedModel}` : ' · no model loaded',
          d.heartbeatAt ? ` · last report ${new Date(d.heartbeatAt).toLocaleTimeString()}` : '',
          d.reason ? el('div', { class: 'note' }, d.reason) : '');
        if (d.state === 'unknown' && !d.stale) {
          const b = el('button', { type: 'button', class: 'confirm' }, 'I checked: it is free');
          b.addEventListener('click', async () => {
            b.disabled = true;
            try { await api.json('POST', `/api/gpus/${encodeURIComponent(d.device)}/confirm`, { body: {} }); status(devStatus, `${d.device}: confirmed free; its agent applies it within seconds.`); } catch (e) { b.disabled = false; fail(devStatus)(e); }
          });
          li.append(' ', b);
        }
        return li;
      });
      devList.replaceChildren(...(items.length ? items : [el('li', { class: 'note' }, 'No GPU has reported yet.')]));
    } catch (e) { fail(devStatus)(e); }
  };
  const devices = section('admin-devices', 'Devices', readiness, devList, devStatus);

  // --- a revisioned thing: list, edit as JSON, preview, commit -----------------------------
  function planView(p) {
    const out = el('div', { class: 'plan' });
    out.append(el('p', {}, `${KIND_WORDS[p.kind] || 'The change'} becomes version ${p.nextRevision} (now ${p.basedOnRevision}).`));
    const ch = (p.changes || []).map((c) => el('li', {}, el('code', {}, c.field.replace(/^roles\./, 'work role ')), ': ', JSON.stringify(c.from ?? null), ' → ', JSON.stringify(c.to ?? null)));
    out.append(ch.length ? el('ul', { class: 'changes' }, ...ch) : el('p', { class: 'note' }, 'Nothing changes.'));
    if (p.affectedRoles?.length) out.append(el('p', {}, `Roles affected: ${p.affectedRoles.join(', ')}.`));
    if (p.affectedRoutes?.length) out.append(el('p', {}, `Routes affected: ${p.affectedRoutes.join(', ')}.`));
    out.append(el('p', { class: 'pinned' }, p.pinnedRuns ? `${p.pinnedRuns} queued or running run${p.pinnedRuns === 1 ? '' : 's'} keep${p.pinnedRuns === 1 ? 's' : ''} the revisions they started with.` : 'No run is queued or running: nothing stays pinned.'));
    for (const w of p.warnings || []) out.append(el('p', { class: 'warning' }, '⚠ ', w));
    return out;
  }

  /** editor: a JSON text box with Preview and Commit (commit only what was previewed). */
  function editor({ label, send, form, saved }) {
    const text = el('textarea', { class: 'json', rows: 8, spellcheck: 'false', 'aria-label': label });
    const planBox = el('div', { class: 'plan-box' });
    const st = el('p', { class: 'admin-status', role: 'status' });
    let previewed = null;
    const commit = el('button', { type: 'button', class: 'commit', disabled: true }, 'Save');
    const preview = el('button', { type: 'button', class: 'preview' }, 'Preview');
    const fromJSON = () => { try { return JSON.parse(text.value); } catch { throw new Error('That is not valid JSON.'); } };
    // With a form, the form is what is sent; the JSON under "Advanced" mirrors it both ways.
    const inputs = new Map();
    const errs = new Map();
    const readForm = () => {
      const out = {};
      for (const f of form || []) {
        const i = inputs.get(f.name);
        if (f.type === 'checkbox') out[f.name] = i.checked;
        else if (f.type === 'number') out[f.name] = i.value === '' ? 0 : Number(i.value);
        else if (i.value.trim() !== '' || f.check) out[f.name] = i.value.trim();
      }
      return out;
    };
    const fillForm = (v) => {
      for (const f of form || []) {
        const i = inputs.get(f.name);
        if (f.type === 'checkbox') i.checked = v[f.name] !== false && (v[f.name] === true || f.name === 'enabled');
        else i.value = v[f.name] ?? '';
      }
      checkForm();
    };
    const checkForm = () => {
      const bad = formErrors(form || [], readForm());
      for (const f of form || []) {
        errs.get(f.name).textContent = bad[f.name] || '';
        inputs.get(f.name).setAttribute('aria-invalid', bad[f.name] ? 'true' : 'false');
      }
      preview.disabled = Object.keys(bad).length > 0;
      return bad;
    };
    const advanced = el('details', { class: 'advanced' }, el('summary', {}, 'Advanced: edit as JSON'), text);
    const parse = () => {
      if (!form || advanced.open) return fromJSON();
      if (Object.keys(checkForm()).length) throw new Error('Fix the fields marked above first.');
      return readForm();
    };
    const fields = form ? el('div', { class: 'form-fields' }, ...form.map((f) => {
      const id = `${label.replace(/\W+/g, '-').toLowerCase()}-${f.name}`;
      const i = f.type === 'select' ? el('select', { id, name: f.name }, ...f.options.map(([v, t]) => el('option', { value: v }, t)))
        : el('input', { id, name: f.name, type: f.type || 'text', placeholder: f.placeholder || '', autocomplete: 'off', spellcheck: 'false', 'aria-describedby': id + '-err' });
      const e = el('span', { class: 'field-error', id: id + '-err', 'aria-live': 'polite' });
      inputs.set(f.name, i);
      errs.set(f.name, e);
      i.addEventListener('input', () => { previewed = null; commit.disabled = true; checkForm(); text.value = JSON.stringify(readForm(), null, 2); });
      i.addEventListener('change', () => i.dispatchEvent(new Event('input')));
      return el('label', { class: 'field' + (f.type === 'checkbox' ? ' check' : '') }, el('span', {}, f.label), i, e);
    })) : null;
    text.addEventListener('input', () => {
      previewed = null; commit.disabled = true;
      if (form) { try { fillForm(JSON.parse(text.value)); } catch { /* half-typed JSON: the form keeps its values */ } }
    });
    preview.addEventListener('click', async () => {
      status(st, 'Previewing…');
      try {
        const input = parse();
        const r = await send(input, { preview: true });
        previewed = { input: text.value, plan: r.plan };
        planBox.replaceChildren(planView(r.plan));
        commit.disabled = false;
        status(st, 'Check the preview, then save.');
      } catch (e) { planBox.replaceChildren(); fail(st)(e instanceof ApiError ? e : { message: e.message }); }
    });
    commit.addEventListener('click', async () => {
      if (!previewed || previewed.input !== text.value) return;
      commit.disabled = true;
      status(st, 'Saving…');
      try {
        const r = await send(parse(), { expectedRevision: previewed.plan.basedOnRevision });
        status(st, saved ? saved(r) : `Saved: version ${r.plan?.nextRevision ?? r.revision}.`);
        previewed = null;
        await refreshAll();
      } catch (e) {
        // Someone else committed first (revision_conflict): preview again.
        fail(st)(e);
      }
    });
    const body = form ? [fields, advanced] : [text];
    return { node: el('div', { class: 'editor' }, ...body, el('div', { class: 'admin-row' }, preview, commit), planBox, st), text, st, planBox, preview, set: (v) => { text.value = JSON.stringify(v, null, 2); if (form) fillForm(v); } };
  }

  function revisioned({ id, title, path, listKey, idField, fields, blank, validate, decorate, form }) {
    const table = el('ul', { class: 'admin-list' });
    const st = el('p', { class: 'admin-status', role: 'status' });
    const ed = editor({ label: `${title}: input (JSON)`, form, send: (input, extra) => api.json('POST', path, { body: { input, ...extra } }) });
    ed.set(blank);
    const load = async () => {
      try {
        const r = await api.json('GET', path);
        const all = r[listKey] || [];
        const deco = decorate ? await decorate() : null;
        table.replaceChildren(...latest(all, idField).map((rec) => {
          const n = all.filter((x) => x[idField] === rec[idField]).length;
          const edit = el('button', { type: 'button', class: 'edit', 'aria-label': `Edit ${rec[idField]}` }, 'Edit');
          edit.addEventListener('click', () => { ed.set(pick(rec, fields)); ed.text.dispatchEvent(new Event('input')); ed.node.querySelector('input, textarea')?.focus(); });
          const li = el('li', { 'data-id': rec[idField] }, el('strong', {}, rec[idField]), ` version ${rec.revision}`, n > 1 ? ` (of ${n})` : '',
            rec.validationRequestedAt ? ' · being checked' : rec.verified === true ? ' · works' : rec.verified === false ? ' · not checked or not working' : '',
            rec.checkFailedAt ? el('div', { class: 'warning' }, `⚠ The latest check failed: ${rec.checkFailure || 'no reason given'}. Work already using it continues; nothing new can be moved to it until a check passes.`) : '', rec.enabled === false ? ' · disabled' : '', ' ', edit);
          if (validate) {
            const v = el('button', { type: 'button', class: 'validate' }, 'Validate');
            v.addEventListener('click', async () => {
              v.disabled = true;
              try {
                const res = await api.json('POST', `${path}/${encodeURIComponent(rec[idField])}/validate?revision=${rec.revision}`, { body: {} });
                if (res.pending) {
                  status(st, `Checking ${rec[idField]} version ${rec.revision}: the agent, which holds its key, answers within a few seconds.`);
                  // Follow it until the agent's result is stored (at most two minutes).
                  const until = Date.now() + 120_000;
                  const again = async () => {
                    const all = await load();
                    const cur = (all || []).find((x) => x[idField] === rec[idField] && x.revision === rec.revision);
                    if (cur?.validationRequestedAt && Date.now() < until) { setTimeout(again, 3000); return; }
                    if (cur) status(st, cur.checkFailedAt ? `The latest check of ${rec[idField]} version ${rec.revision} failed: ${cur.checkFailure}. Work already using it continues.`
                      : cur.verified ? `${rec[idField]} version ${rec.revision} works.` : `${rec[idField]} version ${rec.revision} does not work yet (see the history for why).`, !!cur.checkFailedAt || !cur.verified);
                  };
                  setTimeout(again, 3000);
                } else {
                  status(st, res.verified ? `${rec[idField]} version ${rec.revision} works${res.version ? ' (Hermes ' + res.version + ')' : ''}.` : `${rec[idField]} version ${rec.revision} does not work: ${res.reason}`, !res.verified);
                }
                await load();
              } catch (e) { fail(st)(e); } finally { v.disabled = false; }
            });
            li.append(' ', v);
          }
          if (deco) deco(rec, li);
          return li;
        }));
        if (!all.length) table.replaceChildren(el('li', { class: 'note' }, 'None yet.'));
        return all;
      } catch (e) { fail(st)(e); return null; }
    };
    return { node: section(id, title, table, st, el('p', { class: 'note' }, 'Edit one, or fill in a new one, then preview and save:'), ed.node), load };
  }

  const harnesses = revisioned({ id: 'admin-harnesses', title: 'Harness profiles', path: '/api/harnesses', listKey: 'harnesses', idField: 'profileId',
    fields: HARNESS_FIELDS, form: HARNESS_FORM, blank: { profileId: '', kind: 'hermes', baseUrl: 'https://', profileName: '', keyRef: '' }, validate: true });

  // Each route's last GPU qualification (from /api/system routes[]), a Qualify button and,
  // while a request is queued, waiting or running, its progress polled every few seconds.
  const qualViews = new Map(); // route → its qualification view (latest known)
  const qualBoxes = new Map(); // route → the node showing it in the list
  const qualNotes = new Map(); // route → { text, bad }: the last answer to Qualify
  const polling = new Set();
  const renderQual = (route) => {
    const box = qualBoxes.get(route); // not yet in the page while the list is being built
    if (!box) return;
    const v = qualViews.get(route);
    const verdict = qualificationVerdict(v || {});
    const active = requestActive(v?.request);
    const btn = el('button', { type: 'button', class: 'qualify', 'aria-label': `Qualify ${route}` }, active ? 'Qualifying…' : 'Qualify');
    btn.disabled = active;
    btn.addEventListener('click', () => qualify(route, btn));
    const note = qualNotes.get(route);
    const line = note?.text || requestLine(v?.request);
    const parts = [el('span', { class: 'qualification', 'data-state': v ? verdict.state : 'unknown' }, v ? verdict.text : 'qualification unknown'), ' ', btn];
    if (line) parts.push(el('div', { class: 'note qual-request' + (note?.bad ? ' error' : '') }, line));
    const figs = qualificationFigures(v?.last);
    if (figs.length) {
      const dl = el('dl', { class: 'qual-figures' });
      for (const [k, val] of figs) dl.append(el('dt', {}, k), el('dd', {}, val));
      parts.push(el('details', { class: 'qual-detail' }, el('summary', {}, 'Last qualification'), dl));
    }
    box.replaceChildren(...parts);
    if (active) poll(route);
  };
  const poll = (route) => {
    if (polling.has(route)) return;
    polling.add(route);
    const tick = async () => {
      if (!qualBoxes.get(route)?.isConnected) { polling.delete(route); return; }
      try {
        qualViews.set(route, await api.json('GET', `/api/model-routes/${encodeURIComponent(route)}/qualification`));
        qualNotes.delete(route);
      } catch (e) {
        polling.delete(route);
        qualNotes.set(route, { text: `Progress not refreshed: ${errorText(e)}`, bad: true });
        renderQual(route);
        return;
      }
      if (requestActive(qualViews.get(route)?.request)) { renderQual(route); setTimeout(tick, QUALIFY_POLL_MS); return; }
      polling.delete(route);
      renderQual(route);
      await routes.load(); // the result is recorded on a new revision of the route
    };
    setTimeout(tick, QUALIFY_POLL_MS);
  };
  const qualify = async (route, btn) => {
    btn.disabled = true;
    try {
      const r = await api.json('POST', `/api/model-routes/${encodeURIComponent(route)}/qualify`, { body: {} });
      const v = qualViews.get(route) || { route };
      qualViews.set(route, { ...v, request: { state: r.state || 'queued', reason: (r.note || '').replace(/^queued:\s*/, '') } });
      qualNotes.delete(route);
    } catch (e) {
      qualNotes.set(route, { text: errorText(e), bad: true });
      if (e instanceof ApiError && e.code === 'qualification_in_progress') poll(route); // show its progress
    }
    renderQual(route);
  };
  const routeQualifications = async () => {
    try {
      const s = await api.json('GET', '/api/system');
      for (const v of s.routes || []) if (!polling.has(v.route)) qualViews.set(v.route, v);
    } catch { /* the list still shows; each route says its qualification is unknown */ }
    return (rec, li) => {
      const box = el('div', { class: 'qual-box' });
      li.append(box);
      qualBoxes.set(rec.routeId, box);
      renderQual(rec.routeId);
    };
  };
  const routes = revisioned({ id: 'admin-routes', title: 'Model routes', path: '/api/model-routes', listKey: 'routes', idField: 'routeId',
    fields: ROUTE_FIELDS, form: ROUTE_FORM, blank: { routeId: '', alias: '', device: '', backendModel: '', contextBudget: 32768, maxOutput: 2048, enabled: true }, decorate: routeQualifications });

  // --- role selection -------------------------------------------------------------------------
  const selSt = el('p', { class: 'admin-status', role: 'status' });
  let selRevision = 0;
  // Saving makes a candidate: it is checked, then made live below (Configurations).
  const sel = editor({ label: 'Role selection (JSON)', send: (input, extra) => api.json('PUT', '/api/harness-selection',
    { body: { ...input, expectedRevision: extra.expectedRevision ?? selRevision, preview: !!extra.preview, propose: !extra.preview } }),
  saved: (r) => `Saved as configuration ${r.revision}: it is checked now; make it live under Configurations.` });
  // The form: per kind of work, a harness version, a route version and its tools (out of
  // the admin tool ceiling); the JSON is under "Advanced" and follows the form.
  const selRows = el('div', { class: 'selection-form' });
  let choices = { harnesses: [], routes: [], ceiling: [] };
  const selJSON = (v) => { sel.text.value = JSON.stringify(v, null, 2); sel.text.dispatchEvent(new Event('input')); };
  const harnessProblem = (h) => (!h ? 'Choose a harness.' : h.checkFailedAt ? `Its latest check failed (${h.checkFailure || 'no reason given'}): fix it and check it again first.`
    : h.kind === 'hermes' && !h.verified ? 'Not checked yet: press Validate on it first.' : '');
  const routeProblem = (r) => (!r ? 'Choose a route.' : r.enabled === false ? 'This route version is not in use.' : '');
  const readSelection = () => {
    const roles = {};
    for (const fs of selRows.querySelectorAll('fieldset[data-role]')) {
      const [harness, hr] = fs.querySelector('select[name="harness"]').value.split('@');
      const [route, rr] = fs.querySelector('select[name="route"]').value.split('@');
      const tools = [...fs.querySelectorAll('input[name="tool"]:checked')].map((i) => i.value);
      roles[fs.dataset.role] = { harness, harnessRevision: Number(hr), route, routeRevision: Number(rr), tools };
    }
    return { roles, toolCeiling: choices.ceiling };
  };
  const checkSelection = () => {
    let bad = 0;
    for (const fs of selRows.querySelectorAll('fieldset[data-role]')) {
      const hv = fs.querySelector('select[name="harness"]').value;
      const rv = fs.querySelector('select[name="route"]').value;
      const hp = harnessProblem(choices.harnesses.find((h) => `${h.profileId}@${h.revision}` === hv));
      const rp = routeProblem(choices.routes.find((r) => `${r.routeId}@${r.revision}` === rv));
      fs.querySelector('.harness-error').textContent = hp;
      fs.querySelector('.route-error').textContent = rp;
      bad += (hp ? 1 : 0) + (rp ? 1 : 0);
    }
    sel.preview.disabled = bad > 0;
  };
  const buildSelection = (roles) => {
    selRows.replaceChildren(...Object.keys(roles).sort().map((role) => {
      const b = roles[role] || {};
      const hs = el('select', { name: 'harness', 'aria-label': `Harness for ${role}` }, ...choices.harnesses.map((h) =>
        el('option', { value: `${h.profileId}@${h.revision}` }, `${h.profileId} version ${h.revision}${h.checkFailedAt ? ' (latest check failed)' : h.kind === 'hermes' && !h.verified ? ' (not checked)' : ''}`)));
      hs.value = `${b.harness}@${b.harnessRevision}`;
      const rs = el('select', { name: 'route', 'aria-label': `Model route for ${role}` }, ...choices.routes.map((r) =>
        el('option', { value: `${r.routeId}@${r.revision}` }, `${r.routeId} version ${r.revision} (${r.backendModel} on ${r.device})${r.enabled === false ? ' (not in use)' : ''}`)));
      rs.value = `${b.route}@${b.routeRevision}`;
      const tools = choices.ceiling.map((t) => el('label', { class: 'field check' },
        el('input', { type: 'checkbox', name: 'tool', value: t, checked: !b.tools || b.tools.includes(t) }), el('span', {}, t)));
      const fs = el('fieldset', { 'data-role': role }, el('legend', {}, role),
        el('label', { class: 'field' }, el('span', {}, 'Harness'), hs, el('span', { class: 'field-error harness-error', 'aria-live': 'polite' })),
        el('label', { class: 'field' }, el('span', {}, 'Model route'), rs, el('span', { class: 'field-error route-error', 'aria-live': 'polite' })),
        tools.length ? el('div', { class: 'tools' }, el('span', {}, 'Tools it may use: '), ...tools) : el('p', { class: 'note' }, 'No tools are allowed at all.'));
      fs.addEventListener('change', () => { checkSelection(); selJSON(readSelection()); });
      return fs;
    }));
    checkSelection();
  };
  sel.text.addEventListener('input', (e) => {
    if (!e.isTrusted) return; // the form wrote it
    try { const v = JSON.parse(sel.text.value); if (v.toolCeiling) choices.ceiling = v.toolCeiling; buildSelection(v.roles || {}); } catch { /* half-typed */ }
  });
  const loadSelection = async () => {
    try {
      const [s, h, r] = await Promise.all([api.json('GET', '/api/settings'), api.json('GET', '/api/harnesses'), api.json('GET', '/api/model-routes')]);
      selRevision = s.revision;
      choices = { harnesses: h.harnesses || [], routes: r.routes || [], ceiling: s.toolCeiling || [] };
      sel.text.value = JSON.stringify({ roles: s.roles || {}, toolCeiling: s.toolCeiling || [] }, null, 2);
      buildSelection(s.roles || {});
      status(selSt, `Current version ${s.revision}.`);
    } catch (e) { fail(selSt)(e); }
  };
  const selection = section('admin-selection', 'Which harness and model each kind of work uses', selSt,
    el('p', { class: 'note' }, 'Preview shows what changes and which work already queued or running keeps what it started with.'),
    selRows, el('details', { class: 'advanced' }, el('summary', {}, 'Advanced: edit as JSON (also the tool ceiling)'), sel.text), sel.node);

  // --- configurations: candidates and releases ---------------------------------------------------
  const relList = el('ul', { class: 'admin-list releases' });
  const relSt = el('p', { class: 'admin-status', role: 'status' });
  // Where a configuration goes live: everyone (production) or one runtime environment of
  // the host apps' keys (e.g. staging), which may run a configuration of its own.
  const relEnv = el('select', { id: 'release-env', 'aria-label': 'Where configurations go live' }, el('option', { value: '' }, 'everyone'));
  const relFollow = el('button', { type: 'button', class: 'follow', hidden: '' }, 'Run what everyone runs');
  relEnv.addEventListener('change', () => loadReleases());
  relFollow.addEventListener('click', async () => {
    const env = relEnv.value;
    relFollow.disabled = true;
    try {
      await api.json('POST', `/api/environments/${encodeURIComponent(env)}/follow-production`, { body: {} });
      status(relSt, `${env} runs what everyone runs again.`);
      await Promise.all([loadReleases(), loadAudit()]);
    } catch (e) { fail(relSt)(e); } finally { relFollow.disabled = false; }
  });
  const relAct = (label, cls, path, said) => {
    const b = el('button', { type: 'button', class: cls }, label);
    b.addEventListener('click', async () => {
      b.disabled = true;
      try {
        const r = await api.json('POST', path, { body: relEnv.value ? { environment: relEnv.value } : {} });
        status(relSt, said(r.release));
        await Promise.all([loadReleases(), loadSelection(), loadAudit()]);
      } catch (e) { b.disabled = false; fail(relSt)(e); }
    });
    return b;
  };
  // While a candidate is being checked (its probe runs on the agent), the list looks
  // again every few seconds: each look is also a reconciler pass on the server.
  let relPoll = null;
  const loadReleases = async () => {
    clearTimeout(relPoll);
    relPoll = null;
    try {
      const [r, keys] = await Promise.all([api.json('GET', '/api/releases'), api.json('GET', '/api/runtime-keys').catch(() => ({ keys: [] }))]);
      const own = new Set((r.releases || []).flatMap((x) => x.liveIn || []));
      const envs = new Set([...own, ...(keys.keys || []).map((k) => k.environment).filter((e) => e && e !== 'production')]);
      const picked = envs.has(relEnv.value) ? relEnv.value : '';
      relEnv.replaceChildren(el('option', { value: '' }, 'everyone'), ...[...envs].sort().map((e) => el('option', { value: e }, `${e} (apps' environment)`)));
      relEnv.value = picked;
      relEnv.parentElement.hidden = envs.size === 0;
      relFollow.hidden = !picked || !own.has(picked);
      const env = picked;
      const where = env ? ` in ${env}` : '';
      for (const x of r.releases || []) x.envs = [...own];
      relList.replaceChildren(...(r.releases || []).slice(0, 10).map((x) => {
        const liveHere = env ? (x.liveIn || []).includes(env) || (x.live && !own.has(env)) : x.live;
        const by = (x.approvals || []).map((a) => names.get(a.by) || 'an administrator');
        const li = el('li', { 'data-release': x.seq, 'data-state': liveHere ? 'live' : x.state },
          el('strong', {}, `Configuration ${x.seq}`), ` · ${releaseState(x, env)} · by ${names.get(x.createdBy) || (x.createdBy === 'test' || x.createdBy === 'bootstrap' ? 'the installation' : 'an administrator')}`,
          by.length ? ` · approved by ${by.join(', ')}` : '',
          el('ul', { class: 'changes' }, ...releaseChanges(x).map((t) => el('li', {}, t))),
          el('details', { class: 'evidence' }, el('summary', {}, x.evidence ? (x.evidence.passed ? 'Checks: passed' : 'Checks: not passed') : 'Checks: not made yet'),
            el('ul', {}, ...evidenceLines(x.evidence).map((t) => el('li', {}, t)))));
        const base = `/api/releases/${x.seq}`;
        const bs = [];
        if (x.state === 'collecting') bs.push(relAct('Check now', 'collect', `${base}/evidence`, (v) => `Configuration ${v.seq}: ${releaseState(v)}.`));
        if (x.state === 'ready' && !liveHere && !x.promotedAt) {
          if (!env) bs.push(relAct('Approve', 'approve', `${base}/approve`, (v) => `You approved configuration ${v.seq}.`));
          bs.push(relAct(`Make live${where}`, 'promote', `${base}/promote`, (v) => `Configuration ${v.seq} is live${where}. Work already queued or running keeps what it started with.`));
        }
        if (x.promotedAt && !liveHere) bs.push(relAct(`Go back to this${where}`, 'rollback', `${base}/rollback`, (v) => `Configuration ${v.seq} is live${where} again. Work already queued or running keeps what it started with.`));
        if (bs.length) li.append(el('div', { class: 'admin-row' }, ...bs));
        return li;
      }));
      if (!(r.releases || []).length) relList.replaceChildren(el('li', { class: 'note' }, 'No configuration yet.'));
      if ((r.releases || []).some((x) => x.state === 'collecting') && root.isConnected && !root.closest('[hidden]')) relPoll = setTimeout(loadReleases, 3000);
    } catch (e) { fail(relSt)(e); }
  };
  const releases = section('admin-releases', 'Configurations (checked before they go live)',
    el('p', { class: 'note' }, 'Each saved change is checked against the harnesses, models and GPUs it uses. With two or more administrators, another administrator approves it before it goes live.'),
    el('div', { class: 'admin-row release-env', hidden: '' }, el('label', { for: 'release-env' }, 'Goes live for '), relEnv, relFollow),
    relList, relSt);

  // --- audit ------------------------------------------------------------------------------------
  const auditList = el('ol', { class: 'admin-list audit' });
  const auditSt = el('p', { class: 'admin-status', role: 'status' });
  const loadAudit = async () => {
    try {
      const r = await api.json('GET', '/api/audit?limit=25');
      auditList.replaceChildren(...(r.audit || []).map((a) => el('li', { 'data-action': a.action },
        el('time', { datetime: a.at }, new Date(a.at).toLocaleString()), ' · ', auditWords(a, names))));
      if (!(r.audit || []).length) auditList.replaceChildren(el('li', { class: 'note' }, 'No change recorded yet.'));
    } catch (e) { fail(auditSt)(e); }
  };
  const audit = section('admin-audit', 'History of changes (newest first)', auditList, auditSt);

  async function refreshAll() { await loadPeople(); await Promise.all([loadDevices(), harnesses.load(), routes.load(), loadSelection(), loadReleases(), loadAudit()]); }
  root.replaceChildren(el('h2', {}, 'Administration'), alerts, members, devices, harnesses.node, routes.node, selection, releases, audit);
  return { refresh: refreshAll };
}
