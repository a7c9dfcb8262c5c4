// Time from pressing Send to the first streamed character in the browser, beside the
// scripted backend's own time to first token (a direct streaming request), same run.
import { launch, signUp, send, waitRun, BASE } from '../e2e/helpers.js';

const N = Number(process.env.PA_BENCH_N || 5);
const browser = await launch();
const page = await signUp(browser);
const ui = [];
// Where the time went (resource timing, for the record): click → the send's request
// starts, its answer, the run's stream requested, its headers, the first character.
const parts = { toPost: [], post: [], toStream: [], streamOpen: [], toFirst: [] };
for (let i = 0; i < N; i++) {
  await page.fill('#draft', `bench ${i}`);
  const t0 = await page.evaluate(() => {
    performance.clearResourceTimings();
    const n = document.querySelectorAll('.msg.assistant:not([hidden])').length;
    window.__paFirst = new Promise((resolve) => {
      const obs = new MutationObserver(() => {
        const a = document.querySelectorAll('.msg.assistant:not([hidden])');
        if (a.length > n && a[a.length - 1].innerText.length > 0) { obs.disconnect(); resolve(performance.now()); }
      });
      obs.observe(document.getElementById('messages'), { subtree: true, childList: true, characterData: true, attributes: true });
    });
    document.getElementById('send').click();
    return performance.now();
  });
  const t1 = await page.evaluate(() => window.__paFirst);
  ui.push(t1 - t0);
  await waitRun(page, 'completed');
  // A resource's entry is written when its response ends: the run's stream ends with the run.
  await page.waitForTimeout(50);
  const r = await page.evaluate((t0) => {
    const rs = performance.getEntriesByType('resource').filter((e) => e.startTime >= t0);
    const post = rs.find((e) => /\/messages$/.test(new URL(e.name).pathname));
    const st = rs.find((e) => /^\/stream\/runs\/[^/]+\/events/.test(new URL(e.name).pathname));
    return post && st ? { postStart: post.startTime, postEnd: post.responseEnd, stStart: st.startTime, stHeaders: st.responseStart } : null;
  }, t0);
  if (r) {
    parts.toPost.push(r.postStart - t0); parts.post.push(r.postEnd - r.postStart); parts.toStream.push(r.stStart - r.postEnd);
    parts.streamOpen.push(r.stHeaders - r.stStart); parts.toFirst.push(t1 - r.stHeaders);
  }
}
const direct = [];
for (let i = 0; i < N; i++) {
  const t0 = performance.now();
  const auth = process.env.PA_MODEL_KEY ? { Authorization: 'Bearer ' + process.env.PA_MODEL_KEY } : {};
  const res = await fetch(BASE + '/_dev/model/v1/chat/completions', { method: 'POST', headers: { 'Content-Type': 'application/json', ...auth },
    body: JSON.stringify({ model: 'chat', stream: true, messages: [{ role: 'user', content: `bench ${i}` }] }) });
  if (!res.ok) throw new Error(`the scripted model answered ${res.status} (PA_MODEL_KEY set?)`);
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value);
    if (/"content":"[^"]+"/.test(buf)) { direct.push(performance.now() - t0); await reader.cancel(); break; }
  }
}
const median = (a) => a.sort((x, y) => x - y)[Math.floor(a.length / 2)];
const med = Object.fromEntries(Object.entries(parts).map(([k, v]) => [k, v.length ? Math.round(median(v) * 10) / 10 : null]));
console.log(JSON.stringify({ parts: med }));
console.log(JSON.stringify({ uiMs: median(ui), backendMs: median(direct) }));
await browser.close();
