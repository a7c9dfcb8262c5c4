// The admin console: the same admin API the CLI uses (`pa admin …`), for accounts with the
// admin label. Loaded only for them; the server checks every call anyway. Sections:
// members and invitations, devices (GPU state, confirm an unknown device free), harness
// profiles and model routes (preview, then commit against the previewed revision; each
// route's last GPU qualification, its figures, and Qualify with its progress polled),
// role selection (preview: what changes, which runs stay pinned; commit), the audit log.
import { ApiError } from './api.js';

const HARNESS_FIELDS = ['profileId', 'kind', 'baseUrl', 'profileName', 'keyRef'];
const ROUTE_FIELDS = ['routeId', 'alias', 'device', 'backendModel', 'contextBudget', 'maxOutput', 'localOnly', 'enabled'];

/** latest keeps the highest revision of each id. */
function latest(list, idField) {
  const by = new Map();
  for (const r of list || []) if (!by.has(r[idField]) || by.get(r[idField]).revision < r.revision) by.set(r[idField], r);
  return [...by.values()].sort((a, b) => String(a[idField]).localeCompare(String(b[idField])));
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

/** requestLine: the latest request's progress in words ('' when none is kept). */
export function requestLine(req) {
  if (!req || !req.state) return '';
  const pos = req.position && Number(req.position) > 0 ? ` (position ${req.position})` : '';
  const why = req.reason ? `: ${req.reason}` : '';
  return ACTIVE.has(req.state) ? `Qualification ${req.state}${pos}${why}` : `Last request ${req.state}${why}`;
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

export function mountAdmin(root, api, { el, errorText, copyText }) {
  const status = (node, text, bad = false) => { node.textContent = text; node.className = 'admin-status' + (bad ? ' error' : ''); };
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
  const memberId = el('input', { 'aria-label': 'Account id', placeholder: 'account id', autocomplete: 'off', spellcheck: 'false' });
  const memStatus = el('p', { class: 'admin-status', role: 'status' });
  const setMember = async (member) => {
    const id = memberId.value.trim();
    if (!id) { status(memStatus, 'Enter the account id.', true); return; }
    try {
      const r = await api.json('PUT', `/api/members/${encodeURIComponent(id)}`, { body: { member } });
      status(memStatus, `${r.email || id} ${r.member ? 'is a member now' : 'is no longer a member'}.`);
    } catch (e) { fail(memStatus)(e); }
  };
  const members = section('admin-members', 'Members and invitations',
    el('div', { class: 'admin-row' }, el('label', {}, 'Valid for (hours) ', invHours), el('button', { type: 'button', class: 'invite', onclick: invite }, 'Create invitation')),
    invOut, invStatus,
    el('div', { class: 'admin-row' }, memberId,
      el('button', { type: 'button', class: 'admit', onclick: () => setMember(true) }, 'Admit'),
      el('button', { type: 'button', class: 'remove', onclick: () => setMember(false) }, 'Remove')),
    memStatus);

  // --- devices ---------------------------------------------------------------------------
  const alerts = el('div', { class: 'admin-alerts', role: 'alert', hidden: true });
  const devList = el('ul', { class: 'admin-list devices' });
  const devStatus = el('p', { class: 'admin-status', role: 'status' });
  const loadDevices = async () => {
    try {
      const s = await api.json('GET', '/api/system');
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
  const devices = section('admin-devices', 'Devices', devList, devStatus);

  // --- a revisioned thing: list, edit as JSON, preview, commit -----------------------------
  function planView(p) {
    const out = el('div', { class: 'plan' });
    out.append(el('p', {}, `${p.target || p.kind}: revision ${p.nextRevision} (based on ${p.basedOnRevision}).`));
    const ch = (p.changes || []).map((c) => el('li', {}, el('code', {}, c.field), ': ', JSON.stringify(c.from ?? null), ' → ', JSON.stringify(c.to ?? null)));
    out.append(ch.length ? el('ul', { class: 'changes' }, ...ch) : el('p', { class: 'note' }, 'Nothing changes.'));
    if (p.affectedRoles?.length) out.append(el('p', {}, `Roles affected: ${p.affectedRoles.join(', ')}.`));
    if (p.affectedRoutes?.length) out.append(el('p', {}, `Routes affected: ${p.affectedRoutes.join(', ')}.`));
    out.append(el('p', { class: 'pinned' }, p.pinnedRuns ? `${p.pinnedRuns} queued or running run${p.pinnedRuns === 1 ? '' : 's'} keep${p.pinnedRuns === 1 ? 's' : ''} the revisions they started with.` : 'No run is queued or running: nothing stays pinned.'));
    for (const w of p.warnings || []) out.append(el('p', { class: 'warning' }, '⚠ ', w));
    return out;
  }

  /** editor: a JSON text box with Preview and Commit (commit only what was previewed). */
  function editor({ label, send }) {
    const text = el('textarea', { class: 'json', rows: 8, spellcheck: 'false', 'aria-label': label });
    const planBox = el('div', { class: 'plan-box' });
    const st = el('p', { class: 'admin-status', role: 'status' });
    let previewed = null;
    const commit = el('button', { type: 'button', class: 'commit', disabled: true }, 'Commit');
    const preview = el('button', { type: 'button', class: 'preview' }, 'Preview');
    const parse = () => { try { return JSON.parse(text.value); } catch { throw new Error('That is not valid JSON.'); } };
    text.addEventListener('input', () => { previewed = null; commit.disabled = true; });
    preview.addEventListener('click', async () => {
      status(st, 'Previewing…');
      try {
        const input = parse();
        const r = await send(input, { preview: true });
        previewed = { input: text.value, plan: r.plan };
        planBox.replaceChildren(planView(r.plan));
        commit.disabled = false;
        status(st, 'Check the preview, then commit.');
      } catch (e) { planBox.replaceChildren(); fail(st)(e instanceof ApiError ? e : { message: e.message }); }
    });
    commit.addEventListener('click', async () => {
      if (!previewed || previewed.input !== text.value) return;
      commit.disabled = true;
      status(st, 'Committing…');
      try {
        const r = await send(parse(), { expectedRevision: previewed.plan.basedOnRevision });
        status(st, `Committed: revision ${r.plan?.nextRevision ?? r.revision}.`);
        previewed = null;
        await refreshAll();
      } catch (e) {
        // Someone else committed first (revision_conflict): preview again.
        fail(st)(e);
      }
    });
    return { node: el('div', { class: 'editor' }, text, el('div', { class: 'admin-row' }, preview, commit), planBox, st), text, st, planBox };
  }

  function revisioned({ id, title, path, listKey, idField, fields, blank, validate, decorate }) {
    const table = el('ul', { class: 'admin-list' });
    const st = el('p', { class: 'admin-status', role: 'status' });
    const ed = editor({ label: `${title}: input (JSON)`, send: (input, extra) => api.json('POST', path, { body: { input, ...extra } }) });
    ed.text.value = JSON.stringify(blank, null, 2);
    const load = async () => {
      try {
        const r = await api.json('GET', path);
        const all = r[listKey] || [];
        const deco = decorate ? await decorate() : null;
        table.replaceChildren(...latest(all, idField).map((rec) => {
          const n = all.filter((x) => x[idField] === rec[idField]).length;
          const edit = el('button', { type: 'button', class: 'edit', 'aria-label': `Edit ${rec[idField]}` }, 'Edit');
          edit.addEventListener('click', () => { ed.text.value = JSON.stringify(pick(rec, fields), null, 2); ed.text.dispatchEvent(new Event('input')); ed.text.focus(); });
          const li = el('li', { 'data-id': rec[idField] }, el('strong', {}, rec[idField]), ` r${rec.revision}`, n > 1 ? ` (${n} revisions)` : '',
            rec.verified === true ? ' · verified' : rec.verified === false ? ' · not verified' : '', rec.enabled === false ? ' · disabled' : '', ' ', edit);
          if (validate) {
            const v = el('button', { type: 'button', class: 'validate' }, 'Validate');
            v.addEventListener('click', async () => {
              v.disabled = true;
              try {
                const res = await api.json('POST', `${path}/${encodeURIComponent(rec[idField])}/validate?revision=${rec.revision}`, { body: {} });
                status(st, res.verified ? `${rec[idField]} r${rec.revision} answers${res.version ? ' (version ' + res.version + ')' : ''}: verified.` : `${rec[idField]} r${rec.revision} is not usable: ${res.reason}`, !res.verified);
                await load();
              } catch (e) { fail(st)(e); } finally { v.disabled = false; }
            });
            li.append(' ', v);
          }
          if (deco) deco(rec, li);
          return li;
        }));
        if (!all.length) table.replaceChildren(el('li', { class: 'note' }, 'None yet.'));
      } catch (e) { fail(st)(e); }
    };
    return { node: section(id, title, table, st, el('p', { class: 'note' }, 'Edit one, or write a new one, then preview and commit:'), ed.node), load };
  }

  const harnesses = revisioned({ id: 'admin-harnesses', title: 'Harness profiles', path: '/api/harnesses', listKey: 'harnesses', idField: 'profileId',
    fields: HARNESS_FIELDS, blank: { profileId: '', kind: 'hermes', baseUrl: 'https://', profileName: '', keyRef: 'env:' }, validate: true });

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
    fields: ROUTE_FIELDS, blank: { routeId: '', alias: '', device: '', backendModel: '', contextBudget: 32768, maxOutput: 2048 }, decorate: routeQualifications });

  // --- role selection -------------------------------------------------------------------------
  const selSt = el('p', { class: 'admin-status', role: 'status' });
  let selRevision = 0;
  const sel = editor({ label: 'Role selection (JSON)', send: (input, extra) => api.json('PUT', '/api/harness-selection',
    { body: { ...input, expectedRevision: extra.expectedRevision ?? selRevision, preview: !!extra.preview } }) });
  const loadSelection = async () => {
    try {
      const s = await api.json('GET', '/api/settings');
      selRevision = s.revision;
      sel.text.value = JSON.stringify({ roles: s.roles || {}, toolCeiling: s.toolCeiling || [] }, null, 2);
      status(selSt, `Settings revision ${s.revision}.`);
    } catch (e) { fail(selSt)(e); }
  };
  const selection = section('admin-selection', 'Role selection', selSt,
    el('p', { class: 'note' }, 'Which harness and route revision each kind of work uses. Preview shows what changes and which runs keep their revisions.'), sel.node);

  // --- audit ------------------------------------------------------------------------------------
  const auditList = el('ol', { class: 'admin-list audit' });
  const auditSt = el('p', { class: 'admin-status', role: 'status' });
  const loadAudit = async () => {
    try {
      const r = await api.json('GET', '/api/audit?limit=25');
      auditList.replaceChildren(...(r.audit || []).map((a) => el('li', {},
        el('time', { datetime: a.at }, new Date(a.at).toLocaleString()), ` · ${a.action} ${a.target}`,
        a.fromRevision != null || a.toRevision != null ? ` (r${a.fromRevision ?? 0} → r${a.toRevision ?? '?'})` : '',
        ` · by ${a.actorId}`, a.detail ? el('div', { class: 'note' }, a.detail) : '')));
      if (!(r.audit || []).length) auditList.replaceChildren(el('li', { class: 'note' }, 'No change recorded yet.'));
    } catch (e) { fail(auditSt)(e); }
  };
  const audit = section('admin-audit', 'Audit log (newest first)', auditList, auditSt);

  async function refreshAll() { await Promise.all([loadDevices(), harnesses.load(), routes.load(), loadSelection(), loadAudit()]); }
  root.replaceChildren(el('h2', {}, 'Administration'), alerts, members, devices, harnesses.node, routes.node, selection, audit);
  return { refresh: refreshAll };
}
