// Safe rendering of model output: Markdown through marked, then DOMPurify. Never raw
// HTML: scripts, event handlers, javascript: links, SVG/MathML, forms, frames and images
// (which would fire requests) are removed; links open in a new tab without an opener or
// referrer.
import { marked } from '/vendor/marked.js';
import DOMPurify from '/vendor/dompurify.js';

const FORBID = ['svg', 'math', 'img', 'picture', 'source', 'video', 'audio', 'iframe', 'frame', 'object', 'embed',
  'form', 'input', 'button', 'textarea', 'select', 'style', 'link', 'meta', 'base', 'script', 'template'];

let hooked = false;
function hook() {
  if (hooked) return;
  hooked = true;
  DOMPurify.addHook('afterSanitizeAttributes', (node) => {
    if (node.tagName === 'A') {
      const href = node.getAttribute('href') || '';
      if (!/^(https?:|mailto:|#)/i.test(href)) node.removeAttribute('href');
      node.setAttribute('rel', 'noopener noreferrer');
      node.setAttribute('target', '_blank');
    }
  });
}

/** markdownToSafeHTML returns sanitized HTML for untrusted Markdown. */
export function markdownToSafeHTML(md) {
  hook();
  const html = marked.parse(String(md ?? ''), { async: false, gfm: true, breaks: true });
  return DOMPurify.sanitize(html, { FORBID_TAGS: FORBID, FORBID_ATTR: ['style', 'srcset', 'formaction'], ALLOW_DATA_ATTR: false });
}

/** renderMarkdown puts sanitized Markdown into el. */
export function renderMarkdown(el, md) {
  el.innerHTML = markdownToSafeHTML(md);
}
