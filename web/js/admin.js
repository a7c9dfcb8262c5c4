// The admin console: the same admin API the CLI uses (`pa admin …`), for accounts with the
// admin label. Loaded only for them; the server checks every call anyway. Sections:
// members and invitations, devices (GPU state, confirm an unknown device free), harness
// profiles and model routes (preview, then commit against the previewed revision),
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
  const devList = el('ul', { class: 'admin-list devices' });
  const devStatus = el('p', { class: 'admin-status', role: 'status' });
  const loadDevices = async () => {
    try {
      const s = await api.json('GET', '/api/system');
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

  function revisioned({ id, title, path, listKey, idField, fields, blank, validate }) {
    const table = el('ul', { class: 'admin-list' });
    const st = el('p', { class: 'admin-status', role: 'status' });
    const ed = editor({ label: `${title}: input (JSON)`, send: (input, extra) => api.json('POST', path, { body: { input, ...extra } }) });
    ed.text.value = JSON.stringify(blank, null, 2);
    const load = async () => {
      try {
        const r = await api.json('GET', path);
        const all = r[listKey] || [];
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
          return li;
        }));
        if (!all.length) table.replaceChildren(el('li', { class: 'note' }, 'None yet.'));
      } catch (e) { fail(st)(e); }
    };
    return { node: section(id, title, table, st, el('p', { class: 'note' }, 'Edit one, or write a new one, then preview and commit:'), ed.node), load };
  }

  const harnesses = revisioned({ id: 'admin-harnesses', title: 'Harness profiles', path: '/api/harnesses', listKey: 'harnesses', idField: 'profileId',
    fields: HARNESS_FIELDS, blank: { profileId: '', kind: 'hermes', baseUrl: 'https://', profileName: '', keyRef: 'env:' }, validate: true });
  const routes = revisioned({ id: 'admin-routes', title: 'Model routes', path: '/api/model-routes', listKey: 'routes', idField: 'routeId',
    fields: ROUTE_FIELDS, blank: { routeId: '', alias: '', device: '', backendModel: '', contextBudget: 32768, maxOutput: 2048 } });

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
  root.replaceChildren(el('h2', {}, 'Administration'), members, devices, harnesses.node, routes.node, selection, audit);
  return { refresh: refreshAll };
}
