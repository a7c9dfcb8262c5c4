// The live system panel (issue 32 item 4) and watching for free (issue 29): the panel's
// device and queue state come with the change feed from the stream service, within a
// second of a change and in agreement with the cards, and a tab that follows a running run
// with the panel open causes no function execution at all.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { launch, signUp, send, waitRun, BASE } from './helpers.js';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

async function executions() {
  const res = await fetch(BASE + '/_dev/executions?recent=1');
  assert.equal(res.status, 200, 'the dev stack counts function executions');
  const s = await res.json();
  // What a page can cause: executions of callers' requests (a function's schedule, e.g.
  // the admin function's reconciler every minute, runs on its own).
  s.executions = s.perTrigger?.http ?? 0;
  s.recent = (s.recent || []).filter((e) => e.trigger === 'http');
  return s;
}

/** The panel as shown: each device's state and each queue's line, by name. */
const panel = (page) => page.evaluate(() => {
  const out = { devices: {}, queues: {} };
  for (const d of document.querySelectorAll('#system [data-device]')) out.devices[d.dataset.device] = d.dataset.state + ' ' + d.innerText.replace(/\s+/g, ' ');
  for (const q of document.querySelectorAll('#system [data-queue]')) out.queues[q.dataset.queue] = q.innerText;
  return out;
});

test('live system panel: a change within a second, counts that agree with the cards, and watching costs 0 function executions', async () => {
  const page = await signUp(browser, { viewport: { width: 1280, height: 800 } });
  const api = [];
  page.on('request', (r) => { const u = new URL(r.url()); if (u.pathname.startsWith('/api/')) api.push(`${r.method()} ${u.pathname}`); });
  await page.waitForSelector('#system [data-device="arc"]', { timeout: 10000 });
  assert.ok(await page.isVisible('#system'), 'the panel is on screen');
  const before = await panel(page);
  // The arc's lines (its device and its queue) as shown.
  const arcKey = () => [...document.querySelectorAll('#system [data-device="arc"], #system [data-queue="gpu:arc"]')].map((d) => (d.dataset.state || '') + ':' + d.innerText).join('|');
  const k0 = await page.evaluate(arcKey);

  // Send: the panel changes (the queue takes the job, the device grants it) within a second
  // of the admission's answer.
  const answered = page.waitForResponse((r) => r.request().method() === 'POST' && /\/messages$/.test(new URL(r.url()).pathname));
  await send(page, 'a #long answer while the panel watches');
  await answered;
  const t0 = Date.now();
  await page.waitForFunction((k) => [...document.querySelectorAll('#system [data-device="arc"], #system [data-queue="gpu:arc"]')]
    .map((d) => (d.dataset.state || '') + ':' + d.innerText).join('|') !== k, k0, { timeout: 5000, polling: 'raf' });
  const ms = Date.now() - t0;
  console.log(`system panel: the admission shown ${ms} ms after its answer (${JSON.stringify(before)} → ${JSON.stringify(await panel(page))})`);
  assert.ok(ms < 1000, `the panel changed ${ms} ms after the admission`);

  // While the one run streams, the panel says one running on the arc, and the device is active.
  await page.waitForFunction(() => (document.querySelector('.msg.assistant:not([hidden]) .body')?.innerText || '').length > 10);
  await page.waitForFunction(() => /1 running/.test(document.querySelector('#system [data-queue="gpu:arc"]')?.innerText || ''), null, { timeout: 3000 });
  const running = await page.$$eval('.run .status.running', (s) => s.length);
  assert.equal(running, 1, 'one card running, as the panel says');
  const shown = await panel(page);
  assert.doesNotMatch(shown.devices.arc, /^(idle|unknown) /, `the arc is active while its job streams: ${shown.devices.arc}`);

  // Watch ~18 s: not one function execution (the feed, the panel and the run come from
  // the stream service).
  await new Promise((r) => setTimeout(r, 500));
  const s0 = await executions();
  const len0 = await page.evaluate(() => (document.querySelector('.msg.assistant:not([hidden]) .body')?.innerText || '').length);
  const asked0 = api.length;
  await new Promise((r) => setTimeout(r, 18000));
  const s1 = await executions();
  const len1 = await page.evaluate(() => (document.querySelector('.msg.assistant:not([hidden]) .body')?.innerText || '').length);
  const during = (s1.recent || []).filter((e) => Date.parse(e.at) >= Date.now() - 18500).map((e) => `${e.function} ${e.method} ${e.path}`);
  console.log(`watching 18 s with the panel open: executions ${s1.executions - s0.executions} (${JSON.stringify(during)}), page requests to /api/ ${JSON.stringify(api.slice(asked0))}`);
  assert.ok(len1 > len0 + 100, `it kept streaming (${len0} → ${len1} characters)`);
  assert.equal(s1.executions - s0.executions, 0, `function executions while watching: ${during}`);
  assert.deepEqual(api.slice(asked0), [], 'no request to the functions while watching');

  // The run ends: the panel goes back to nothing running within a second of the card.
  await waitRun(page, 'completed', 30000);
  const t1 = Date.now();
  await page.waitForFunction(() => !/running/.test(document.querySelector('#system [data-queue="gpu:arc"]')?.innerText || 'running'), null, { timeout: 5000, polling: 'raf' });
  const ms1 = Date.now() - t1;
  console.log(`system panel: the run's end shown ${ms1} ms after its card`);
  assert.ok(ms1 < 1000, `nothing running on the panel ${ms1} ms after the card completed`);
  assert.deepEqual(page.errors, []);
  await page.context().close();
});
