// Branches of a conversation (issue 34), without the DOM. Each user message follows one
// earlier user message (its parent) or none; an edit, a regeneration and a retry are new
// user messages beside the one they replace. A message without parentId follows the
// previous user message by sequence (before branches, and from the CLI), exactly like
// schema.EffectiveParent on the server, whose Branch gives the agent the same path.
export const ROOT = 'root';

/** tree indexes a conversation's messages: users by id, children by parent ('' = none). */
export function tree(messages) {
  const users = messages.filter((m) => m.role === 'user').sort((a, b) => a.sequence - b.sequence);
  const byId = new Map(users.map((u) => [u.id, u]));
  const parent = new Map();
  let prev = '';
  for (const u of users) {
    let p;
    if (u.parentId === undefined || u.parentId === null || u.parentId === '') p = prev;
    else if (u.parentId === ROOT) p = '';
    else { const x = byId.get(u.parentId); p = x && x.sequence < u.sequence ? x.id : ''; }
    parent.set(u.id, p);
    prev = u.id;
  }
  const children = new Map();
  for (const u of users) {
    const p = parent.get(u.id);
    if (!children.has(p)) children.set(p, []);
    children.get(p).push(u);
  }
  return { users, byId, parent, children };
}

/**
 * path returns the user messages shown, oldest first: at each turn the version chosen
 * (chosen: Map parent → message id), else the newest one.
 */
export function path(t, chosen = new Map()) {
  const out = [];
  let at = '';
  for (;;) {
    const kids = t.children.get(at);
    if (!kids?.length) return out;
    const pick = kids.find((k) => k.id === chosen.get(at)) || kids[kids.length - 1];
    out.push(pick);
    at = pick.id;
  }
}

/** versions of a user message: its position among its siblings (1-based) and their count. */
export function versions(t, id) {
  const kids = t.children.get(t.parent.get(id) ?? '') || [];
  return { index: kids.findIndex((k) => k.id === id) + 1, count: kids.length, siblings: kids };
}

/** parentFor: the parentId a new version of message id names (ROOT for a first message). */
export function parentFor(t, id) { return t.parent.get(id) || ROOT; }
