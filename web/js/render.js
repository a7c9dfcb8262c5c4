// Safe rendering of model output: Markdown through marked, then DOMPurify. Never raw
// HTML: HTML written by the model is shown as text (escaped, never silently dropped);
// what DOMPurify still sees is stripped of scripts, event handlers, javascript: links,
// SVG/MathML, forms, frames and images (which would fire requests). Links open in a new
// tab without an opener or referrer. Code blocks get a copy button and, once settled,
// syntax highlighting from highlight.js (served from node_modules as /vendor/highlight.js,
// loaded on first use).
import { Marked } from '/vendor/marked.js';
import DOMPurify from '/vendor/dompurify.js';

const FORBID = ['svg', 'math', 'img', 'picture', 'source', 'video', 'audio', 'iframe', 'frame', 'object', 'embed',
  'form', 'input', 'button', 'textarea', 'select', 'style', 'link', 'meta', 'base', 'script', 'template'];

const ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
export const escapeHTML = (s) => String(s).replace(/[&<>"']/g, (c) => ESC[c]);

// HTML tokens (block and inline) are rendered as their text: the reader sees exactly what
// the model wrote.
// An image in model output is never fetched (a request to a URL the model chose would
// leak that the answer was read, and from where): a placeholder shows its alt text.
const md = new Marked({ async: false, gfm: true, breaks: true, renderer: {
  html: ({ text }) => escapeHTML(text),
  image: ({ text }) => `<span class="img-placeholder" role="img" aria-label="Image not shown: ${escapeHTML(text || 'no description')}">Image: ${escapeHTML(text || 'no description')}</span>`,
} });

let hooked = false;
function hook() {
  if (hooked) return;
  hooked = true;
  DOMPurify.addHook('afterSanitizeAttributes', (node) => {
    if (node.tagName === 'A') {
      const href = node.getAttribute('href') || '';
      // A link that is not web, mail or in-page (javascript:, data:, …) is disabled and
      // styled as text (a:not([href])), saying why on hover.
      if (!/^(https?:|mailto:|#)/i.test(href)) { node.removeAttribute('href'); node.setAttribute('title', 'Link disabled: not a web address'); }
      node.setAttribute('rel', 'noopener noreferrer');
      node.setAttribute('target', '_blank');
    }
  });
}

const PURIFY = { FORBID_TAGS: FORBID, FORBID_ATTR: ['style', 'srcset', 'formaction'], ALLOW_DATA_ATTR: false };

/** markdownToSafeHTML returns sanitized HTML for untrusted Markdown. */
export function markdownToSafeHTML(text) {
  hook();
  return DOMPurify.sanitize(md.parse(String(text ?? '')), PURIFY);
}

/** renderMarkdown puts sanitized Markdown into el (replacing its content). */
export function renderMarkdown(el, text, { highlight = true } = {}) {
  el.innerHTML = markdownToSafeHTML(text);
  enhanceCode(el, highlight);
}

/** appendMarkdown appends sanitized Markdown after el's content. */
export function appendMarkdown(el, text, { highlight = true } = {}) {
  const t = document.createElement('template');
  t.innerHTML = markdownToSafeHTML(text);
  enhanceCode(t.content, highlight);
  el.append(t.content);
}

// --- code blocks --------------------------------------------------------------------------
let hljs = null;
let hljsLoading = null;
function loadHighlighter() {
  hljsLoading ??= import('/vendor/highlight.js').then((m) => { hljs = m.default; hljs.configure({ ignoreUnescapedHTML: true }); return hljs; })
    .catch(() => null);
  return hljsLoading;
}

function highlight(code) {
  const lang = (/(?:^|\s)language-([\w+#.-]+)/.exec(code.className) || [])[1];
  const apply = (h) => {
    if (!h) return;
    const src = code.textContent;
    let html;
    try {
      html = lang && h.getLanguage(lang) ? h.highlight(src, { language: lang, ignoreIllegals: true }).value
        : src.length < 20000 ? h.highlightAuto(src).value : null;
    } catch { html = null; }
    if (html == null) return;
    // highlight.js escapes the source; DOMPurify is the second fence (spans with classes only).
    code.innerHTML = DOMPurify.sanitize(html, { ALLOWED_TAGS: ['span'], ALLOWED_ATTR: ['class'] });
    code.classList.add('hljs');
  };
  if (hljs) apply(hljs); else loadHighlighter().then(apply);
}

/** enhanceCode gives every <pre><code> under root a toolbar with a Copy button. */
export function enhanceCode(root, doHighlight = true) {
  const pres = root.tagName === 'PRE' ? [root] : root.querySelectorAll?.('pre') || [];
  for (const pre of pres) {
    if (pre.parentElement?.classList.contains('code')) continue;
    const code = pre.querySelector('code');
    if (!code) continue;
    const lang = (/(?:^|\s)language-([\w+#.-]+)/.exec(code.className) || [])[1] || '';
    const wrap = document.createElement('div');
    wrap.className = 'code';
    const bar = document.createElement('div');
    bar.className = 'code-bar';
    const label = document.createElement('span');
    label.textContent = lang || 'code';
    const btn = document.createElement('button');
    btn.type = 'button';
    btn.className = 'copy';
    btn.textContent = 'Copy';
    btn.setAttribute('aria-label', `Copy ${lang || 'code'} block`);
    btn.addEventListener('click', () => copyText(code.textContent, btn));
    bar.append(label, btn);
    pre.replaceWith(wrap);
    wrap.append(bar, pre);
    if (doHighlight) highlight(code);
  }
}

/** copyText copies text and says so on the button (and falls back when the API is missing). */
export async function copyText(text, btn) {
  let ok = false;
  try {
    await navigator.clipboard.writeText(text);
    ok = true;
  } catch {
    const ta = document.createElement('textarea');
    ta.value = text;
    ta.setAttribute('readonly', '');
    ta.style.position = 'fixed';
    ta.style.opacity = '0';
    document.body.append(ta);
    ta.select();
    try { ok = document.execCommand('copy'); } catch { ok = false; }
    ta.remove();
  }
  if (btn) {
    const was = btn.dataset.label || btn.textContent;
    btn.dataset.label = was;
    btn.textContent = ok ? 'Copied' : 'Copy failed';
    clearTimeout(btn._t);
    btn._t = setTimeout(() => { btn.textContent = was; }, 1500);
  }
  return ok;
}
