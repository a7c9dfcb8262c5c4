// StreamView renders a streaming Markdown answer in linear time. Tokens are appended to a
// text node (O(delta) per frame). At a pause in the stream (debounced, with a maximum
// wait) the text is split at the last safe block boundary (a blank line outside a code
// fence, not followed by indented continuation): the finished blocks are parsed once
// and appended to a settled container that is never rebuilt; only the open block (the
// tail) is re-parsed. finish() renders the whole answer once, exactly as a reload would.
import { appendMarkdown, renderMarkdown } from './render.js';

const FENCE = /^ {0,3}(`{3,}|~{3,})/;

export class StreamView {
  /**
   * @param {HTMLElement} body the element the answer lives in
   * @param {{debounce?: number, maxWait?: number, timers?: boolean}} opts
   */
  constructor(body, { debounce = 120, maxWait = 400, timers = true } = {}) {
    this.body = body;
    this.debounce = debounce;
    this.maxWait = maxWait;
    this.timers = timers;
    this.reset();
  }

  reset() {
    this.text = '';          // everything appended
    this.committed = 0;      // text[0:committed] is parsed into settled
    this.scanPos = 0;        // text[0:scanPos] has been scanned for boundaries
    this.inFence = null;     // the open fence marker while scanning
    this.pendingBlank = false;
    this.boundary = 0;       // candidate boundary (after a blank line outside a fence)
    this.liveFrom = 0;       // text[committed:liveFrom] is parsed into live
    this.finished = false;
    clearTimeout(this.t1); clearTimeout(this.t2); this.t1 = this.t2 = null;
    this.settled = document.createElement('div');
    this.settled.className = 'md-settled';
    this.live = document.createElement('div');
    this.live.className = 'md-live';
    this.raw = document.createTextNode('');
    this.rawSpan = document.createElement('span');
    this.rawSpan.className = 'md-raw';
    this.rawSpan.append(this.raw);
    this.live.append(this.rawSpan);
    this.body.replaceChildren(this.settled, this.live);
  }

  /** set shows text, which usually extends what is shown (else it starts over). */
  set(text) {
    if (this.finished && text === this.text) return;
    if (!text.startsWith(this.text) || this.finished) { this.reset(); }
    if (text.length > this.text.length) this.append(text.slice(this.text.length));
  }

  /** append adds streamed text: O(delta) now, parsing at the next pause. */
  append(delta) {
    if (!delta) return;
    this.text += delta;
    this.raw.appendData(delta);
    if (!this.timers) return;
    clearTimeout(this.t1);
    this.t1 = setTimeout(() => this.pause(), this.debounce);
    this.t2 ??= setTimeout(() => this.pause(), this.maxWait);
  }

  scan() {
    // Only complete lines are scanned; a boundary is the start of a line that follows a
    // blank line outside a fence and does not begin with indentation (a list continuation
    // or indented code must stay with its block).
    const t = this.text;
    let i = this.scanPos;
    for (;;) {
      const nl = t.indexOf('\n', i);
      if (nl < 0) break;
      const line = t.slice(i, nl);
      const m = FENCE.exec(line);
      if (this.inFence) {
        if (m && m[1][0] === this.inFence[0] && m[1].length >= this.inFence.length && !line.slice(m[0].length).trim()) this.inFence = null;
      } else if (m) {
        this.inFence = m[1];
      } else if (this.pendingBlank && line.trim() !== '' && !/^\s/.test(line)) {
        this.boundary = i;
      }
      if (!this.inFence) this.pendingBlank = line.trim() === '';
      i = nl + 1;
    }
    this.scanPos = i;
  }

  /** pause parses what arrived since the last pause. */
  pause() {
    clearTimeout(this.t1); clearTimeout(this.t2); this.t1 = this.t2 = null;
    if (this.finished) return;
    this.scan();
    if (this.boundary > this.committed) {
      appendMarkdown(this.settled, this.text.slice(this.committed, this.boundary));
      this.committed = this.boundary;
    }
    if (this.liveFrom === this.text.length && this.raw.length === 0) return;
    const tail = this.text.slice(this.committed);
    if (tail.trim()) renderMarkdown(this.live, tail, { highlight: false }); else this.live.replaceChildren();
    this.liveFrom = this.text.length;
    this.raw.data = '';
    // New tokens flow into the deepest last element (the open paragraph, item or code).
    // Marked ends blocks with a newline text node: dropped, so the tail joins the open
    // block inline instead of showing on a line of its own until the next parse.
    let at = this.live;
    for (;;) {
      while (at.lastChild && at.lastChild.nodeType === 3 && !at.lastChild.data.trim()) at.lastChild.remove();
      const last = at.lastElementChild;
      if (!last || at.lastChild !== last) break;
      if (last.classList.contains('code')) { at = last.querySelector('code') || last; break; }
      if (!/^(P|LI|UL|OL|BLOCKQUOTE|H[1-6]|PRE|CODE|EM|STRONG|DEL|TABLE|THEAD|TBODY|TR|TD|TH)$/.test(last.tagName)) break;
      at = last;
    }
    at.append(this.rawSpan);
  }

  /** finish renders the whole answer once (the same HTML a reload shows). */
  finish(text = this.text) {
    clearTimeout(this.t1); clearTimeout(this.t2); this.t1 = this.t2 = null;
    this.text = text;
    this.finished = true;
    renderMarkdown(this.body, text);
  }
}
