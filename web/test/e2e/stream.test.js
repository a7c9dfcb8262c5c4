// Streaming in the browser: stable nodes (settled Markdown is never rebuilt), the final
// render equal to a reload's, focus kept while tokens stream, auto-scroll with "jump to
// latest", and a live region only on the streaming message.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { launch, signUp, send, waitRun, BASE } from './helpers.js';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

test('StreamView appends into stable nodes and re-parses only the open block', async () => {
  const ctx = await browser.newContext();
  const page = await ctx.newPage();
  await page.goto(BASE);
  const r = await page.evaluate(async () => {
    const { StreamView } = await import('/js/stream.js');
    const { renderMarkdown } = await import('/js/render.js');
    const parts = [];
    for (let i = 0; i < 30; i++) {
      parts.push(`Paragraph ${i} has **bold** words and \`code\`.`, '');
      if (i % 10 === 3) parts.push('```js', `const x${i} = ${i};`, '', `console.log(x${i});`, '```', '');
      if (i % 10 === 6) parts.push('- item a', '- item b', '', '    indented continuation', '');
    }
    const text = parts.join('\n');
    const body = document.createElement('div');
    document.body.append(body);
    const v = new StreamView(body, { timers: false });
    let removedFromSettled = 0;
    new MutationObserver((ms) => { for (const m of ms) removedFromSettled += m.removedNodes.length; })
      .observe(v.settled, { childList: true });
    let first = null;
    for (let i = 0; i < text.length; i += 7) {
      v.append(text.slice(i, i + 7));
      if (i % 140 === 0) v.pause();
      if (!first && v.settled.firstChild) first = v.settled.firstChild;
    }
    v.pause();
    await new Promise((res) => setTimeout(res, 0));
    const stable = first && first.isConnected && v.settled.firstChild === first;
    const settledBlocks = v.settled.children.length;
    const liveLen = v.text.length - v.committed;
    const streamedText = body.innerText.replace(/Copy/g, '').replace(/\s+/g, ' ').trim();
    v.finish();
    const ref = document.createElement('div');
    document.body.append(ref);
    renderMarkdown(ref, text, { highlight: false });
    const finalText = body.innerText.replace(/Copy/g, '').replace(/\s+/g, ' ').trim();
    const refText = ref.innerText.replace(/Copy/g, '').replace(/\s+/g, ' ').trim();
    return { stable, firstType: first && first.nodeName, firstConnected: first && first.isConnected, settledFirst: v.settled.firstChild && v.settled.firstChild.nodeName, removedFromSettled, settledBlocks, liveLen, total: text.length, same: finalText === refText, streamedSame: streamedText === refText, finalText: finalText.slice(0, 200), refText: refText.slice(0, 200) };
  });
  assert.ok(r.stable, 'the first settled block is the same node at the end ' + JSON.stringify(r));
  assert.equal(r.removedFromSettled, 0, 'settled Markdown is never rebuilt');
  assert.ok(r.settledBlocks > 20, JSON.stringify(r));
  assert.ok(r.liveLen < 200, `only the open block stays live (${r.liveLen} of ${r.total} chars)`);
  assert.ok(r.same, `the final render equals a reload's:\n${r.finalText}\n${r.refText}`);
  assert.ok(r.streamedSame, 'the streamed render reads the same as the final one');
  await ctx.close();
});

test('streaming keeps focus on buttons, auto-scrolls, offers "jump to latest", and is the only live region', async () => {
  const page = await signUp(browser, { viewport: { width: 900, height: 600 } });
  await send(page, 'a #long answer please', 'research');
  // The research job starts the member's own Hermes first (make dev runs the real one).
  await page.waitForFunction(() => ([...document.querySelectorAll('.msg.assistant:not([hidden]) .body')].pop()?.innerText.length || 0) > 0, null, { timeout: 120000 });
  const grow = async (n) => {
    const len = await page.evaluate(() => [...document.querySelectorAll('.msg.assistant:not([hidden]) .body')].pop()?.innerText.length || 0);
    await page.waitForFunction((l) => ([...document.querySelectorAll('.msg.assistant:not([hidden]) .body')].pop()?.innerText.length || 0) > l, len + n, { timeout: 30000 });
  };
  await grow(300);
  await page.waitForFunction(() => { const b = document.getElementById('messages'); return b.scrollHeight > 3 * b.clientHeight; }, null, { timeout: 30000 });
  // Only the streaming message is a live region.
  const live = await page.evaluate(() => [...document.querySelectorAll('[aria-live]')].map((n) => n.id || n.className));
  assert.deepEqual(live.filter((x) => x !== 'composer-status'), ['body'], JSON.stringify(live));
  assert.equal(await page.getAttribute('#messages', 'aria-live'), null);

  // Auto-scroll follows the stream.
  await grow(200);
  const atEndFn = () => { const b = document.getElementById('messages'); return b.scrollHeight - b.scrollTop - b.clientHeight < 80; };
  const atEnd = async () => { try { await page.waitForFunction(atEndFn, null, { timeout: 2000 }); return true; } catch { return false; } };
  for (let i = 0; i < 4; i++) {
    assert.ok(await atEnd(), 'follows while streaming');
    await grow(60);
  }
  // Scrolled up: it stays put and offers a jump.
  await page.hover('#messages');
  await page.mouse.wheel(0, -100000);
  await page.waitForFunction(() => document.getElementById('messages').scrollTop === 0);
  await page.evaluate(() => { window.__log = []; const b = document.getElementById('messages'); b.addEventListener('scroll', () => window.__log.push([performance.now() | 0, b.scrollTop, b.scrollHeight])); });
  await grow(200);
  assert.equal(await page.evaluate(() => document.getElementById('messages').scrollTop), 0, 'reading position kept ' + JSON.stringify(await page.evaluate(() => window.__log)));
  await page.waitForSelector('#jump:not([hidden])');
  await page.click('#jump');
  await grow(200);
  assert.ok(await atEnd(), 'back to following after "jump to latest"');
  assert.equal(await page.isVisible('#jump'), false);

  // A focused button keeps focus while tokens stream (stable nodes).
  await page.focus('.run .actions .cancel');
  await grow(300);
  assert.equal(await page.evaluate(() => document.activeElement?.classList.contains('cancel') && document.activeElement.isConnected), true);
  await page.keyboard.press('Enter');
  await waitRun(page, 'cancelled');
  assert.deepEqual(await page.evaluate(() => [...document.querySelectorAll('#messages [aria-live]')].length), 0, 'no live region once settled');
});
