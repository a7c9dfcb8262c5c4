// Main-thread time to render a streamed 20,000-token Markdown answer in Chromium, against
// a plain-text floor measured in the same run (the same tokens appended as raw text to
// stable nodes, one per paragraph, with the same forced layout per frame). Tokens arrive a few per animation frame, as the
// follower batches them; StreamView parses at pauses (every PAUSE frames, its maxWait at
// 60 fps) and renders the whole answer once at the end. For scale it also times the old
// approach (all Markdown re-rendered every frame) over the first 2,000 tokens only: it is
// quadratic and would take minutes at 20,000.
//
//   PA_BASE_URL=http://127.0.0.1:8080 node test/bench/render.mjs     (make dev running)
// or through `make bench` (BenchmarkStreamingRender in scripts/dev).
import { launch, BASE } from '../e2e/helpers.js';

const TOKENS = Number(process.env.PA_BENCH_TOKENS || 20000);
const PER_FRAME = Number(process.env.PA_BENCH_PER_FRAME || 4);
const PAUSE = Number(process.env.PA_BENCH_PAUSE || 24);
const RUNS = Number(process.env.PA_BENCH_RUNS || 3);

const browser = await launch();
const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
const page = await ctx.newPage();
await page.goto(BASE);
const out = await page.evaluate(async ({ TOKENS, PER_FRAME, PAUSE, RUNS }) => {
  const { StreamView } = await import('/js/stream.js');
  const { renderMarkdown } = await import('/js/render.js');
  // A 20,000-token answer: paragraphs, lists, code blocks and tables.
  const tokens = [];
  const words = ['the', 'agent', 'reads', 'each', 'file', 'and', 'writes', 'a', '**short**', 'note', 'about', '`code`', 'it', 'found'];
  let n = 0;
  while (tokens.length < TOKENS) {
    const k = n++;
    if (k % 12 === 5) {
      tokens.push('\n\n```js\n');
      for (let i = 0; i < 10; i++) tokens.push(`const v${i} = f(${i});`, ' // step\n');
      tokens.push('```\n\n');
    } else if (k % 12 === 8) {
      tokens.push('\n\n');
      for (let i = 0; i < 6; i++) tokens.push(`- item ${i}`, ' with', ' words\n');
      tokens.push('\n');
    } else if (k % 12 === 10) {
      tokens.push('\n\n| a | b |\n| --- | --- |\n');
      for (let i = 0; i < 5; i++) tokens.push(`| ${i} `, `| ${i * 2} |\n`);
      tokens.push('\n');
    } else {
      for (let i = 0; i < 60; i++) tokens.push(' ' + words[(k + i) % words.length]);
      tokens.push('.\n\n');
    }
  }
  tokens.length = TOKENS;
  const frames = [];
  for (let i = 0; i < tokens.length; i += PER_FRAME) frames.push(tokens.slice(i, i + PER_FRAME).join(''));

  const host = () => {
    const d = document.createElement('div');
    d.className = 'msg assistant';
    const b = document.createElement('div');
    b.className = 'body';
    d.append(b);
    document.body.replaceChildren(d);
    return b;
  };
  // The floor: the raw text, no Markdown, in stable nodes (one pre-wrap block per
  // paragraph, so a frame lays out only the paragraph it grows, like the stream does).
  const plain = (fs) => {
    const b = host();
    let t = null;
    const block = () => { const p = document.createElement('div'); p.className = 'md-raw'; t = document.createTextNode(''); p.append(t); b.append(p); };
    block();
    const t0 = performance.now();
    for (const f of fs) {
      const parts = f.split('\n\n');
      t.appendData(parts[0]);
      for (let i = 1; i < parts.length; i++) { block(); t.appendData(parts[i]); }
      void b.offsetHeight;
    }
    return performance.now() - t0;
  };
  const stream = (fs) => {
    const b = host();
    const v = new StreamView(b, { timers: false });
    const t0 = performance.now();
    let i = 0;
    for (const f of fs) { v.append(f); if (++i % PAUSE === 0) v.pause(); void b.offsetHeight; }
    const t1 = performance.now();
    v.finish();
    void b.offsetHeight;
    return { streamMs: t1 - t0, finishMs: performance.now() - t1 };
  };
  const naive = (fs) => {
    const b = host();
    let text = '';
    const t0 = performance.now();
    for (const f of fs) { text += f; renderMarkdown(b, text, { highlight: false }); void b.offsetHeight; }
    return performance.now() - t0;
  };
  const med = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
  const r = { plain: [], stream: [], finish: [], naive2k: [], stream2k: [] };
  const small = frames.slice(0, Math.ceil(2000 / PER_FRAME));
  stream(small); plain(small); // warm up
  for (let i = 0; i < RUNS; i++) {
    r.plain.push(plain(frames));
    const s = stream(frames);
    r.stream.push(s.streamMs);
    r.finish.push(s.finishMs);
    r.naive2k.push(naive(small));
    r.stream2k.push(stream(small).streamMs);
  }
  const chars = frames.join('').length;
  return { tokens: tokens.length, chars, frames: frames.length, plainMs: med(r.plain), streamMs: med(r.stream), finishMs: med(r.finish),
    naive2kMs: med(r.naive2k), stream2kMs: med(r.stream2k) };
}, { TOKENS, PER_FRAME, PAUSE, RUNS });
out.ratio = (out.streamMs + out.finishMs) / out.plainMs;
out.perFrameMs = (out.streamMs + out.finishMs) / out.frames;
console.log(JSON.stringify(out));
await browser.close();
