// Live updates over the stream service (issue 29): runs and the change feed follow
// /stream/… over SSE; a tab that only watches costs no function execution; the function
// long-poll carries them only while the stream service is unreachable, and the page says so.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { launch, signUp, send, waitRun, lastAnswer, BASE } from './helpers.js';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

const DELAYED = 'Live updates are delayed (stream unavailable); retrying…';
const LONG = 'streaming tokens for a long while '.repeat(200).trim();
const STORY = 'once upon a time there was a careful agent '.repeat(12).trim();

/** Records the paths (with query) of the page's requests to the stream service and to the
 * functions' long-polls. */
function watchRequests(page) {
  const seen = { stream: [], polls: [] };
  page.on('request', (r) => {
    const u = new URL(r.url());
    if (u.origin !== new URL(BASE).origin) return;
    if (u.pathname.startsWith('/stream/')) seen.stream.push(u.pathname + u.search);
    if (/^\/api\/runs\/[^/]+\/events$/.test(u.pathname) || (u.pathname === '/api/conversations/feed' && u.searchParams.has('after'))) seen.polls.push(u.pathname + u.search);
  });
  return seen;
}

const answers = (page) => page.$$eval('.msg.assistant:not([hidden]) .body', (a) => a.map((x) => x.innerText.trim().replace(/\s+/g, ' ')));
const answerLength = (page) => page.evaluate(() => ([...document.querySelectorAll('.msg.assistant:not([hidden]) .body')].pop()?.innerText || '').length);

async function secondTab(a) {
  const b = await a.context().newPage();
  b.errors = [];
  b.on('pageerror', (e) => b.errors.push(e.message));
  const seen = watchRequests(b);
  await b.goto(a.url());
  await b.waitForSelector('.msg.user');
  return { b, seen };
}

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

test('over SSE: reload mid-stream shows the answer exactly once and complete, and no long-poll is made', async () => {
  const page = await signUp(browser);
  const seen = watchRequests(page);
  await send(page, 'tell me a #story');
  await page.waitForFunction(() => (document.querySelector('.msg.assistant:not([hidden])')?.innerText || '').length > 20);
  await page.reload();
  await page.waitForSelector('.msg.user');
  await waitRun(page, 'completed', 30000);
  assert.deepEqual(await answers(page), [STORY]);
  assert.ok(seen.stream.some((p) => p.startsWith('/stream/runs/')), `the run followed over SSE: ${seen.stream}`);
  assert.ok(seen.stream.some((p) => p.startsWith('/stream/feed')), 'the feed over SSE');
  assert.deepEqual(seen.polls, [], 'no function long-poll while the stream service answers');
  assert.equal(await page.textContent('#live-note'), '');
  assert.deepEqual(page.errors, []);
});

test('over SSE: another tab sees a new message live within a second', async () => {
  const a = await signUp(browser);
  const seenA = watchRequests(a);
  await send(a, 'first from tab A');
  await waitRun(a, 'completed');
  const { b } = await secondTab(a);
  const sent = b.waitForResponse((r) => /\/messages$/.test(new URL(r.url()).pathname) && r.request().method() === 'POST');
  await send(b, 'from tab B over the stream');
  await sent;
  const t0 = Date.now();
  await a.waitForFunction(() => [...document.querySelectorAll('.msg.user')].some((m) => m.innerText.includes('from tab B over the stream')), null, { timeout: 10000, polling: 'raf' });
  const ms = Date.now() - t0;
  console.log(`sse feed: a message from tab B shown in tab A ${ms} ms after it was admitted`);
  assert.ok(ms < 1000, `shown in tab A after ${ms} ms`);
  await waitRun(a, 'completed');
  assert.equal(await a.$$eval('.msg.user', (m) => m.length), 2, 'once, not twice');
  assert.deepEqual(seenA.polls, [], 'tab A made no function long-poll');
  assert.deepEqual([...a.errors, ...b.errors], []);
});

test('offline for 10 s mid-stream, then caught up exactly (resumed after the last applied event)', async () => {
  const page = await signUp(browser);
  const seen = watchRequests(page);
  await send(page, 'a #long answer please');
  await page.waitForFunction(() => (document.querySelector('.msg.assistant:not([hidden]) .body')?.innerText || '').length > 40);
  // The run's event streams (not GET /stream/runs/{id}, its record read once at the end).
  const events = (p) => /^\/stream\/runs\/[^/]+\/events/.test(p);
  const runsBefore = seen.stream.filter(events).length;
  await page.context().setOffline(true);
  await new Promise((r) => setTimeout(r, 10000));
  await page.context().setOffline(false);
  await waitRun(page, 'completed', 60000);
  assert.deepEqual(await answers(page), [LONG]);
  const resumed = seen.stream.filter(events).slice(runsBefore);
  assert.ok(resumed.length >= 1, 'the stream was opened again');
  assert.ok(resumed.every((p) => Number(new URL(p, BASE).searchParams.get('after')) > 0), `resumed from the last applied event: ${resumed}`);
  assert.deepEqual(seen.polls, [], 'offline is not "stream unavailable": no long-poll');
  assert.deepEqual(page.errors, []);
});

test('a tab that only watches a running run causes no function execution', async () => {
  const a = await signUp(browser);
  await send(a, 'a #long answer to watch');
  await a.waitForFunction(() => (document.querySelector('.msg.assistant:not([hidden]) .body')?.innerText || '').length > 10);
  const { b, seen } = await secondTab(a);
  await b.waitForFunction(() => (document.querySelector('.msg.assistant:not([hidden]) .body')?.innerText || '').length > 10);
  await new Promise((r) => setTimeout(r, 1500)); // the opening's calls are done
  const s0 = await executions();
  const len0 = await answerLength(b);
  await new Promise((r) => setTimeout(r, 10000));
  const s1 = await executions();
  const len1 = await answerLength(b);
  assert.ok(len1 > len0 + 100, `tab B kept streaming (${len0} → ${len1} characters)`);
  assert.equal(await b.evaluate(() => [...document.querySelectorAll('.run')].pop()?.querySelector('.status')?.classList.contains('running')), true, 'the run is still running');
  const grew = (f) => (s1.perFunction[f] || 0) - (s0.perFunction[f] || 0);
  const during = (s1.recent || []).filter((e) => Date.parse(e.at) >= Date.now() - 10500).map((e) => `${e.function} ${e.method} ${e.path}`);
  console.log(`watching 10 s: executions ${s1.executions - s0.executions} (${JSON.stringify(during)})`);
  assert.equal(grew('runs'), 0, `runs executions while watching: ${during}`);
  assert.equal(grew('conversations'), 0, `conversations executions while watching: ${during}`);
  assert.deepEqual(seen.polls, []);
  await a.click('#stop');
  await waitRun(a, 'cancelled', 30000);
  assert.deepEqual([...a.errors, ...b.errors], []);
});

test('stream service unreachable: the long-poll carries the run, paced, the page says so, and the stream is used again once back', async () => {
  const page = await signUp(browser, {}, async (p) => {
    await p.route('**/stream/**', (r) => r.fulfill({ status: 502, contentType: 'text/html', body: '<h1>502 Bad Gateway</h1>' }));
  });
  const seen = watchRequests(page);
  await page.waitForFunction((t) => document.getElementById('live-note')?.textContent === t, DELAYED, { timeout: 10000 });
  const note = await page.$eval('#live-note', (n) => ({ role: n.getAttribute('role'), position: getComputedStyle(n).position, visible: n.getBoundingClientRect().height > 0 }));
  assert.deepEqual(note, { role: 'status', position: 'fixed', visible: true }, 'an accessible notice that moves nothing');
  // Idle in fallback: the feed's polls are paced (each waits ≤ 2 s, then ≥ 1.5 s of pause).
  const from = seen.polls.length;
  await new Promise((r) => setTimeout(r, 6000));
  const feedPolls = seen.polls.slice(from).filter((p) => p.startsWith('/api/conversations/feed'));
  assert.ok(feedPolls.length >= 1 && feedPolls.length <= 5, `${feedPolls.length} feed polls in 6 s: ${feedPolls}`);
  assert.ok(feedPolls.every((p) => /[?&]wait=[0-2](&|$)/.test(p)), `waits of at most 2 s: ${feedPolls}`);
  await send(page, 'tell me a #story');
  await waitRun(page, 'completed', 30000);
  assert.deepEqual(await answers(page), [STORY]);
  assert.ok(seen.polls.some((p) => /^\/api\/runs\/[^/]+\/events\?/.test(p) && /[?&]wait=2(&|$)/.test(p)), 'the run came through the long-poll');
  // The stream service is back: within the retry period the notice goes.
  await page.unroute('**/stream/**');
  await page.waitForFunction(() => document.getElementById('live-note')?.textContent === '', null, { timeout: 20000 });
  assert.deepEqual(page.errors, []);
});

// Six tabs, each in its own browser context: the dev stack speaks HTTP/1.1, where Chromium
// opens at most 6 connections per origin and profile, so six tabs of one profile (a feed
// and a run stream each) would queue every other request behind their streams; the
// deployed proxies speak HTTP/2, which multiplexes them over one connection.
test('six tabs with running runs: an admission still answers within a second', async () => {
  const tabs = [];
  for (let i = 0; i < 6; i++) {
    const p = await signUp(browser);
    await send(p, `tab ${i}: a #long answer`);
    await p.waitForSelector('.run', { state: 'attached' });
    tabs.push(p);
  }
  for (const p of tabs) {
    await p.waitForFunction(() => ['running', 'queued'].some((c) => [...document.querySelectorAll('.run')].pop()?.querySelector('.status')?.classList.contains(c)));
  }
  // A seventh tab sends while the six follow their runs.
  const c = await signUp(browser);
  const times = {};
  c.on('request', (r) => { if (r.method() === 'POST' && /\/messages$/.test(new URL(r.url()).pathname)) times.asked = Date.now(); });
  c.on('response', (r) => { if (r.request().method() === 'POST' && /\/messages$/.test(new URL(r.url()).pathname)) { times.answered = Date.now(); times.status = r.status(); } });
  await send(c, 'admitted while six tabs watch');
  await c.waitForSelector('.run', { state: 'attached' });
  const ms = times.answered - times.asked;
  console.log(`admission with six tabs following running runs: ${ms} ms`);
  assert.ok(times.status >= 200 && times.status < 300, `admitted (${times.status})`);
  assert.ok(ms < 1000, `admission took ${ms} ms`);
  // Free the device for the tests that follow (a run may have settled meanwhile).
  for (const p of tabs) await p.click('#stop', { timeout: 2000 }).catch(() => {});
  await waitRun(c, 'completed', 60000);
  assert.deepEqual([...tabs, c].flatMap((p) => p.errors), []);
  await Promise.all([...tabs, c].map((p) => p.context().close()));
});
