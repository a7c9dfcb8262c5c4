// In-page checks both browser suites run (test/e2e in Chromium through playwright-core,
// test/engines in Firefox and WebKit through driver.js): each is a function evaluated in
// the page, so it must stand alone (no closure over this module).

/** The text of each message on screen (the branch shown), in order. */
export function shownTexts() {
  return [...document.querySelectorAll('#messages .msg:not([hidden]) .body')].map((b) => b.innerText.trim());
}

/** A disabled link (a javascript: URL in model output): its text and how it is styled beside its paragraph. */
export function disabledLink() {
  const a = document.querySelector('.msg.assistant a:not([href])');
  return a && { text: a.textContent, color: getComputedStyle(a).color, body: getComputedStyle(a.closest('.body')).color, deco: getComputedStyle(a).textDecorationLine };
}

/** The message box's placeholder: the width it needs and the width it has. */
export function placeholderFit() {
  const t = document.getElementById('draft');
  const c = document.createElement('canvas').getContext('2d');
  c.font = getComputedStyle(t, '::placeholder').font || getComputedStyle(t).font;
  return { need: c.measureText(t.placeholder).width, have: t.clientWidth - parseFloat(getComputedStyle(t).paddingLeft) - parseFloat(getComputedStyle(t).paddingRight) };
}

/** Where the unparsed tail of a streaming answer sits: inside the paragraph it continues. */
export async function streamingTail() {
  const { StreamView } = await import('/js/stream.js');
  const body = document.createElement('div');
  document.body.append(body);
  const v = new StreamView(body, { timers: false });
  v.append('First paragraph.\n\nSecond starts');
  v.pause();
  v.append(' and goes on');
  const where = { parent: v.rawSpan.parentElement.tagName, text: v.rawSpan.parentElement.textContent };
  body.remove();
  return where;
}
