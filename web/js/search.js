// Search over what was said (issue 34): the sidebar's search box filters titles at once
// and, after a pause, asks the server (GET /api/conversations/search: the caller's own
// messages, the engine's fulltext match) for messages. Snippets arrive as parts; matched
// words are put in <mark> as text, never as HTML. Choosing one opens its conversation on
// the branch that holds the message and scrolls to it.

/** snippetNodes renders snippet parts as text nodes and <mark> elements. */
export function snippetNodes(doc, parts) {
  return (parts || []).map((p) => {
    if (!p.hit) return doc.createTextNode(p.text);
    const m = doc.createElement('mark');
    m.textContent = p.text;
    return m;
  });
}

/**
 * mountSearch wires the box to a results list.
 * @param {{input: HTMLInputElement, list: HTMLElement, api: object, open: (hit) => void, wait?: number}} o
 */
export function mountSearch({ input, list, api, open, wait = 300 }) {
  let timer = null, seq = 0;
  const clear = () => { list.replaceChildren(); list.hidden = true; };
  async function run(q) {
    const mine = ++seq;
    let res;
    try { res = await api.searchMessages(q); } catch { if (mine === seq) { list.replaceChildren(note('Search is unavailable right now.')); list.hidden = false; } return; }
    if (mine !== seq) return;
    const items = res.results.map((h) => {
      const b = document.createElement('button');
      b.type = 'button';
      b.className = 'hit';
      const head = document.createElement('span');
      head.className = 'hit-head';
      head.textContent = `${h.conversationTitle} · ${h.role === 'user' ? 'you' : 'answer'}`;
      const body = document.createElement('span');
      body.className = 'hit-snippet';
      body.append(...snippetNodes(document, h.snippet));
      b.append(head, body);
      b.addEventListener('click', () => open(h));
      const li = document.createElement('li');
      li.append(b);
      return li;
    });
    const title = document.createElement('li');
    title.className = 'hits-title';
    title.textContent = items.length ? 'In messages' : `No message contains “${q}”.`;
    list.replaceChildren(title, ...items);
    list.hidden = false;
  }
  function note(t) { const li = document.createElement('li'); li.className = 'hits-title'; li.textContent = t; return li; }
  input.addEventListener('input', () => {
    clearTimeout(timer);
    const q = input.value.trim();
    if ([...q].length < 2) { seq++; clear(); return; }
    timer = setTimeout(() => run(q), wait);
  });
  clear();
  return { clear: () => { seq++; clearTimeout(timer); clear(); } };
}
