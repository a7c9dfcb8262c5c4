// Browser tests for the bugs of issue 17 that the demo stack can reproduce (real runs,
// real reloads). States the stack cannot produce on demand are in states.test.js.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { launch, signUp, send, waitRun, lastAnswer, lastCard, reload } from './helpers.js';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

// A member's first research or coding job starts their own Hermes (make dev runs the real
// one per member): seconds on an idle host, tens of seconds on a loaded 2-core one.
const HERMES_START = 120000;

const answers = (page) => page.$$eval('#messages > .msg', (ms) => ms.filter((m) => !m.hidden).map((m) => `${m.classList.contains('user') ? 'U' : 'A'}:${m.querySelector('.body').innerText.trim()}`));

test('after a reload, answers are in message order, not in the order they finished', async () => {
  const page = await signUp(browser);
  await send(page, 'first: tell me a #story');
  await page.waitForFunction(() => document.querySelectorAll('.msg.user').length === 1);
  await send(page, 'second quick one');
  // The second waits for the story being written (issue 34: kept in order), then answers.
  await page.waitForFunction(() => [...document.querySelectorAll('.msg.assistant .body')].some((b) => b.innerText.includes('You said: second quick one')));
  await page.waitForFunction(() => [...document.querySelectorAll('.run .status')].every((s) => s.classList.contains('completed')), null, { timeout: 30000 });
  const live = await answers(page);
  await reload(page);
  await page.waitForFunction(() => document.querySelectorAll('.msg.assistant:not([hidden])').length === 2);
  const after = await answers(page);
  assert.equal(after.length, 4, after.join('\n'));
  assert.match(after[0], /^U:first/);
  assert.match(after[1], /^A:once upon a time/);
  assert.match(after[2], /^U:second/);
  assert.match(after[3], /^A:You said: second quick one/);
  assert.deepEqual(after, live, 'the same order as seen live');
});

test('text streamed in earlier turns stays after a reload, with the turns apart', async () => {
  const page = await signUp(browser);
  await send(page, 'please run #tool', 'coding');
  await page.waitForSelector('.run .approval:not([hidden])', { timeout: HERMES_START });
  await page.click('.run .approval:not([hidden]) .allow');
  await waitRun(page, 'completed');
  const want = /Let me clear the scratch folder\.\s*\n\s*\n?\s*The scratch folder is taken care of\./;
  assert.match(await lastAnswer(page), want);
  await reload(page);
  await page.waitForFunction(() => /taken care of/.test(document.querySelector('.msg.assistant:not([hidden]) .body')?.innerText || ''));
  await page.waitForFunction(() => /Let me clear/.test(document.querySelector('.msg.assistant:not([hidden]) .body')?.innerText || ''));
  const text = await lastAnswer(page);
  assert.match(text, want);
  assert.doesNotMatch(text, /folder\.The/);
  assert.equal(await page.$$eval('.msg.assistant .body p', (ps) => ps.length), 2, 'two paragraphs, one per turn');
});

test('a cancelled run never shows live approval buttons, before or after a reload', async () => {
  const page = await signUp(browser);
  await send(page, 'please run #tool', 'coding');
  await page.waitForSelector('.run .approval:not([hidden])', { timeout: HERMES_START });
  await page.click('.run .actions .cancel');
  await waitRun(page, 'cancelled');
  assert.equal(await page.isVisible('.run .approval'), false);
  assert.equal(await page.locator('button:has-text("Allow once")').filter({ visible: true }).count(), 0);
  assert.match(await lastCard(page), /cancelled/);
  await reload(page);
  await page.waitForFunction(() => document.querySelector('.run .status')?.classList.contains('cancelled'));
  // Let the replay of its events settle, then check again.
  await page.waitForFunction(() => document.querySelectorAll('.run .approval:not([hidden])').length === 0);
  assert.equal(await page.locator('button:has-text("Allow once")').filter({ visible: true }).count(), 0);
  assert.equal(await page.isVisible('#stop'), false);
});

test('a denial shows as denied on the card, live and after a reload', async () => {
  const page = await signUp(browser);
  await send(page, 'please run #tool', 'coding');
  await page.waitForSelector('.run .approval:not([hidden])', { timeout: HERMES_START });
  const waiting = await page.evaluate(() => [...document.querySelectorAll('.run')].pop().innerText);
  await page.click('.run .approval:not([hidden]) .deny');
  assert.equal((waiting.match(/approval/gi) || []).length, 1, 'said once: ' + waiting);
  await waitRun(page, 'completed');
  for (const when of ['live', 'after reload']) {
    if (when !== 'live') { await reload(page); await page.waitForFunction(() => document.querySelector('.run .decisions li')); }
    const card = await page.evaluate(() => [...document.querySelectorAll('.run')].pop().innerText);
    assert.match(card, /done · you denied a command/, when);
    assert.match(card, /You denied rm -rf scratch — it was not run\./, when);
    assert.ok(await page.$eval('.run .status', (s) => s.classList.contains('denied')), when);
  }
});

test('chat turns get no "completed" card; run cards never repeat words or show heartbeats while streaming', async () => {
  const page = await signUp(browser);
  await send(page, 'hello there');
  await waitRun(page, 'completed');
  assert.equal(await page.isVisible('.run'), false, 'no card for a plain chat answer');
  // A long job keeps its card: sample it while tokens stream.
  await send(page, 'a #long answer please', 'research');
  await page.waitForFunction(() => (document.querySelectorAll('.msg.assistant:not([hidden]) .body')[1]?.innerText || '').length > 40, null, { timeout: HERMES_START });
  const seen = new Set();
  for (let i = 0; i < 10; i++) {
    seen.add(await lastCard(page));
    await page.waitForTimeout(150);
  }
  await page.click('#stop');
  await waitRun(page, 'cancelled');
  seen.add(await lastCard(page));
  for (const c of seen) {
    assert.doesNotMatch(c, /heartbeat|ago/, c);
    const words = c.split(/\s*·\s*/).map((w) => w.trim().toLowerCase()).filter(Boolean);
    assert.equal(new Set(words).size, words.length, 'no repeated words: ' + c);
  }
});

test('a conversation started with "+ New conversation" is titled from its first message', async () => {
  const page = await signUp(browser);
  await send(page, 'something to open with');
  await waitRun(page, 'completed');
  await page.click('#new-conv');
  assert.match(await page.textContent('#messages'), /Start a conversation/);
  await send(page, 'Plan a weekend in Porto\nwith two kids');
  await waitRun(page, 'completed');
  const titles = await page.$$eval('#conversations li button.conv', (b) => b.map((x) => x.textContent));
  assert.deepEqual(titles, ['Plan a weekend in Porto', 'something to open with']);
  assert.ok(!titles.includes('New conversation'));
  await reload(page);
  assert.deepEqual(await page.$$eval('#conversations li button.conv', (b) => b.map((x) => x.textContent)), titles, 'the title is stored');
  assert.deepEqual(page.errors, []);
});

test('a tab coming back into view shows messages sent from another tab', async () => {
  const a = await signUp(browser);
  await send(a, 'from tab A');
  await waitRun(a, 'completed');
  const b = await a.context().newPage(); // same session: another tab
  await b.goto(a.url());
  await b.waitForSelector('.msg.user');
  await send(b, 'from tab B');
  await waitRun(b, 'completed');
  await b.fill('#draft', '');
  await b.click('#new-conv');
  await send(b, 'a new conversation from tab B');
  await waitRun(b, 'completed');
  // Tab A comes back into view.
  await a.bringToFront();
  await a.evaluate(() => window.dispatchEvent(new Event('focus')));
  await a.waitForFunction(() => /from tab B/.test(document.getElementById('messages').innerText), null, { timeout: 10000 });
  await a.waitForFunction(() => document.querySelectorAll('#conversations li').length === 2);
  assert.match(await a.textContent('#conversations'), /a new conversation from tab B/);
  await a.waitForFunction(() => /You said: from tab B/.test([...document.querySelectorAll('.msg.assistant:not([hidden]) .body')].pop()?.innerText || ''));
  assert.match(await lastAnswer(a), /You said: from tab B/);
});

test('coming back into view while a sync is in flight still catches up', async () => {
  // Tab A hears nothing through its change feed (every stream and long-poll is held), so only its
  // syncs can show what tab B sends; the runs list its first sync reads is answered as it
  // was before tab B sent, but handed over only after tab A has come back into view again.
  let holdNext = false, fetched, release;
  const read = new Promise((r) => { fetched = r; });
  const gate = new Promise((r) => { release = r; });
  const a = await signUp(browser, {}, async (page) => {
    await page.route((u) => (u.pathname === '/api/conversations/feed' && u.searchParams.has('after')) || u.pathname === '/stream/feed', () => {});
    await page.route((u) => u.pathname === '/api/runs', async (route) => {
      if (!holdNext) return route.continue();
      holdNext = false;
      const resp = await route.fetch();
      fetched();
      await gate;
      await route.fulfill({ response: resp });
    });
  });
  await send(a, 'from tab A');
  await waitRun(a, 'completed');
  const b = await a.context().newPage();
  await b.goto(a.url());
  await b.waitForSelector('.msg.user');
  holdNext = true;
  await a.bringToFront();
  await a.evaluate(() => window.dispatchEvent(new Event('focus')));
  await read; // tab A's sync has read the runs: tab B's is not among them
  await b.bringToFront();
  await send(b, 'from tab B');
  await waitRun(b, 'completed');
  await a.bringToFront();
  await a.evaluate(() => window.dispatchEvent(new Event('focus')));
  release();
  await a.waitForFunction(() => /from tab B/.test(document.getElementById('messages').innerText), null, { timeout: 10000 });
  // The re-opened conversation replays the answer's events: it arrives a moment later.
  await a.waitForFunction(() => /You said: from tab B/.test([...document.querySelectorAll('.msg.assistant:not([hidden]) .body')].pop()?.innerText || ''));
  assert.match(await lastAnswer(a), /You said: from tab B/);
});

test('a conversation opened twice at once shows its history once', async () => {
  // Two opens of the same conversation racing (a sync re-opening it while the start after a
  // reconnect does, as in the restore drill): both read, and only the later one renders.
  let slow = false;
  const page = await signUp(browser, {}, async (p) => {
    await p.route((u) => u.pathname === '/api/runs', async (route) => {
      if (slow) await new Promise((r) => setTimeout(r, 400));
      await route.continue();
    });
  });
  await send(page, 'only once');
  await waitRun(page, 'completed');
  slow = true;
  let answered = 0;
  page.on('response', (r) => { if (new URL(r.url()).pathname === '/api/runs') answered++; });
  await page.evaluate(() => { const b = document.querySelector('#conversations button.conv.active'); b.click(); b.click(); });
  await page.waitForFunction(() => document.querySelectorAll('#messages .run').length > 0);
  while (answered < 2) await page.waitForTimeout(50); // both opens have read their runs
  await page.waitForTimeout(300); // and rendered what they read
  assert.equal(await page.$$eval('#messages .msg.user', (ms) => ms.length), 1, 'one user message');
  assert.equal(await page.$$eval('#messages .run', (rs) => rs.length), 1, 'one run card');
});
