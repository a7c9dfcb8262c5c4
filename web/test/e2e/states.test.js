// Browser tests for states the demo stack cannot produce on demand (Redis down, a frozen
// server, rate limits, failed and cancelling runs, rich Markdown) through a scripted /api
// (fake.js; sign-in stays real), and the screenshots of the run.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { launch, signUp, shot } from './helpers.js';
import { fakeApi, run, ev, events } from './fake.js';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

const conv = { id: 'c1', title: 'Rendering demo', lastActivityAt: '2026-01-01T10:00:00Z', createdAt: '2026-01-01T10:00:00Z' };
const msg = (id, sequence, role, text, runId) => ({ id, sequence, role, text, runId, createdAt: '2026-01-01T10:00:00Z' });

const RICH = [
  'Here is a plan, with **bold** text and `inline code`:',
  '',
  '1. Read the file',
  '2. Count the lines',
  '',
  '```python',
  'def count(path):',
  '    # one pass over the file',
  '    with open(path) as f:',
  '        return sum(1 for _ in f)',
  '```',
  '',
  '| tool | time |',
  '| --- | --- |',
  '| wc | 1 s |',
  '',
  'Raw HTML stays text: <b>not bold</b> <script>alert(1)</script>',
].join('\n');

function richFixture() {
  return {
    conversations: [conv, { ...conv, id: 'c2', title: 'Trip to Porto' }, { ...conv, id: 'c3', title: 'Quarterly report' }],
    messages: { c1: [msg('m-r1', 1, 'user', 'Show me some Markdown', 'r1'), msg('a1', 3, 'assistant', RICH, 'r1'),
      msg('m-r2', 2, 'user', 'Clean up /tmp please', 'r2'), msg('m-r3', 4, 'user', 'And list the big files', 'r3')] },
    runs: { c1: [
      run('r3', { role: 'coding', status: 'waiting_for_approval', terminal: false, phase: 'waiting for approval' }),
      run('r2', { role: 'coding', status: 'completed' }),
      run('r1', { role: 'chat', status: 'completed' }),
    ] },
    events: {
      r1: events(ev('message.delta', { text: RICH }), ev('run.completed', {})),
      r2: events(ev('message.delta', { text: 'I will clean it.' }), ev('approval.request', { requestId: 'q', command: 'rm -rf /tmp/*', description: 'dangerous command: terminal' }),
        ev('approval.responded', { requestId: 'q', choice: 'deny' }), ev('message.delta', { text: 'Understood, I left /tmp alone.' }), ev('run.completed', {})),
      r3: events(ev('run.status', { status: 'running', phase: 'thinking' }), ev('message.delta', { text: 'Let me look.' }),
        ev('run.status', { status: 'waiting_for_approval', phase: 'waiting for approval' }),
        ev('approval.request', { requestId: 'q3', command: 'du -ah / | sort -h | tail', description: 'dangerous command: terminal' })),
    },
    system: { devices: [{ device: 'arc', host: 'gpu1', state: 'idle', loadedModel: 'chat', activeModel: null, heartbeatAt: new Date().toISOString(), stale: false }],
      queues: [{ name: 'gpu:arc', pending: 0, active: 1, scheduled: 0, retry: 0, latencyMs: 0, paused: false }], staleAfterMs: 30000 },
  };
}

test('Markdown renders: code highlighted with a copy button, lists, tables; HTML shown as text', async () => {
  const page = await signUp(browser, { permissions: ['clipboard-read', 'clipboard-write'] }, (p) => fakeApi(p, richFixture()));
  await page.waitForSelector('.msg.assistant .code .hljs-keyword', { timeout: 10000 });
  const a = page.locator('.msg.assistant').first();
  assert.equal(await a.locator('ol li').count(), 2);
  assert.equal(await a.locator('table td').count(), 2);
  assert.equal(await a.locator('.code-bar span').first().textContent(), 'python');
  const body = await a.locator('.body').innerText();
  assert.match(body, /<b>not bold<\/b> <script>alert\(1\)<\/script>/, 'HTML is shown, not dropped');
  assert.equal(await a.locator('.body b, .body script').count(), 0);
  await a.locator('.code-bar .copy').click();
  // The copy is asynchronous (the clipboard API): wait for the button's answer.
  await page.waitForFunction(() => document.querySelector('.msg.assistant .code-bar .copy').textContent !== 'Copy');
  assert.match(await a.locator('.code-bar .copy').textContent(), /Copied/);
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), 'def count(path):\n    # one pass over the file\n    with open(path) as f:\n        return sum(1 for _ in f)\n');
  await a.locator('.msg-tools .copy').click();
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), RICH, 'copy a message copies its Markdown');
  assert.deepEqual(page.errors, []);
});

test('System panel: idle devices are not "running"; Redis down reads "status unavailable"', async () => {
  let fx = richFixture();
  const page = await signUp(browser, {}, (p) => fakeApi(p, { ...fx, system: () => fx.system }));
  await page.waitForFunction(() => /arc/.test(document.getElementById('system').innerText));
  const idle = await page.textContent('#system');
  assert.doesNotMatch(idle, /running/, idle);
  assert.match(idle, /arc: idle/);
  fx = { ...fx, system: { devices: [], queues: null, queueError: 'queue state is unavailable', staleAfterMs: 30000 } };
  await page.evaluate(() => document.querySelector('#system').replaceChildren());
  await page.reload();
  await page.waitForFunction(() => /unavailable/i.test(document.getElementById('system').innerText));
  const down = await page.textContent('#system');
  assert.match(down, /Status unavailable/);
  assert.doesNotMatch(down, /No GPU/);
});

test('a frozen server shows the offline state within seconds; the message is kept and sent when it answers', async () => {
  let frozen = false;
  const sent = [];
  const fx = { ...richFixture(), hang: () => frozen, onRequest: async (route, req, p) => {
    if (req.method() === 'POST' && /messages$/.test(p)) {
      sent.push(JSON.parse(req.postData()));
      await route.fulfill({ status: 202, contentType: 'application/json', body: JSON.stringify({ runId: 'r9', messageId: 'm9', sequence: 9, status: 'queued' }) });
      return true;
    }
    return false;
  } };
  fx.runs.c1.push(run('r9', { status: 'completed', role: 'chat' }));
  fx.events.r9 = events(ev('message.delta', { text: 'Back.' }), ev('run.completed', {}));
  const page = await signUp(browser, {}, (p) => fakeApi(p, fx));
  await page.waitForSelector('.msg.user');
  frozen = true;
  await page.fill('#draft', 'are you there?');
  const t0 = Date.now();
  await page.press('#draft', 'Enter');
  await page.waitForSelector('#net:not([hidden])', { timeout: 10000 });
  const took = Date.now() - t0;
  assert.ok(took < 9000, `offline shown after ${took} ms`);
  assert.match(await page.textContent('#net'), /not answering/);
  assert.match(await page.textContent('#composer-status'), /Sending/, 'the composer says what it is doing');
  frozen = false;
  await page.waitForSelector('#net', { state: 'hidden', timeout: 10000 });
  await page.waitForFunction(() => [...document.querySelectorAll('.msg.user')].some((m) => m.innerText.includes('are you there?')), null, { timeout: 30000 });
  assert.equal(new Set(sent.map((b) => b.requestId)).size, 1, 'one requestId across retries');
  assert.equal(await page.textContent('#composer-status'), '');
});

test('Send is never disabled silently: retries and limits are explained in plain words', async () => {
  let mode = 'limit';
  let tries = 0;
  const fx = { ...richFixture(), onRequest: async (route, req, p) => {
    if (!(req.method() === 'POST' && /messages$/.test(p))) return false;
    tries++;
    if (mode === 'limit') {
      await route.fulfill({ status: 429, contentType: 'application/json', headers: { 'Retry-After': '1' },
        body: JSON.stringify({ error: { code: 'rate_limited', message: 'too many messages: at most 60 per 1m0s' } }) });
    } else if (mode === 'down') {
      await route.abort('connectionrefused');
    } else {
      await route.fulfill({ status: 202, contentType: 'application/json', body: JSON.stringify({ runId: 'r1', messageId: 'mx', sequence: 9, status: 'completed' }) });
    }
    return true;
  } };
  const page = await signUp(browser, {}, (p) => fakeApi(p, fx));
  await page.waitForSelector('.msg.user');
  await page.fill('#draft', 'one more');
  await page.click('#send');
  await page.waitForFunction(() => /faster than allowed/.test(document.getElementById('composer-status').textContent));
  const said = await page.textContent('#composer-status');
  assert.doesNotMatch(said, /1m0s|rate_limited/);
  assert.match(said, /kept/);
  mode = 'down';
  await page.waitForFunction(() => /offline|cannot be reached/.test(document.getElementById('composer-status').textContent), null, { timeout: 10000 });
  assert.equal(await page.isEnabled('#send'), true, 'Send offers "Retry now" while waiting');
  assert.equal(await page.textContent('#send'), 'Retry now');
  mode = 'ok';
  await page.click('#send');
  await page.waitForFunction(() => document.getElementById('draft').value === '');
  assert.equal(await page.textContent('#send'), 'Send');
  assert.ok(tries >= 3);
});

test('failed and cancelling runs are worded for people', async () => {
  const fx = richFixture();
  fx.messages.c1 = [msg('m-f1', 1, 'user', 'do the thing', 'f1'), msg('m-f2', 2, 'user', 'and this', 'f2')];
  fx.runs.c1 = [
    run('f2', { role: 'research', status: 'running', terminal: false, phase: 'cancelling', cancelRequested: true }),
    run('f1', { role: 'research', status: 'interrupted', error: 'The gateway restarted before this run settled.' }),
  ];
  fx.events = { f1: events(ev('run.interrupted', { error: 'The gateway restarted before this run settled.' })), f2: [] };
  const page = await signUp(browser, {}, (p) => fakeApi(p, fx));
  await page.waitForSelector('.run .status.interrupted');
  const cards = await page.$$eval('.run', (cs) => cs.map((c) => c.innerText));
  assert.match(cards[0], /restarted before this answer finished/);
  assert.doesNotMatch(cards[0], /gateway/);
  assert.match(cards[1], /cancelling…/);
  assert.equal((cards[1].match(/cancelling/g) || []).length, 1, cards[1]);
});

test('empty states explain the kinds of work; who is signed in is shown; favicon', async () => {
  const page = await signUp(browser);
  await page.waitForSelector('#messages .empty');
  const text = await page.textContent('#messages');
  assert.match(text, /Chat/);
  assert.match(text, /Research job/);
  assert.match(text, /Coding job.*asks you first/s);
  assert.match(await page.textContent('#conv-empty'), /No conversations yet/);
  assert.match(await page.textContent('#who'), new RegExp(page.email.replace(/[.]/g, '\\.')));
  assert.match(await page.textContent('#who-side'), /Signed in as/);
  const icon = await page.getAttribute('link[rel=icon]', 'href');
  const res = await page.request.get(new URL(icon, page.url()).href);
  assert.equal(res.status(), 200);
});

test('dark mode follows the system, the toggle overrides it, and it is remembered', async () => {
  const page = await signUp(browser, { colorScheme: 'dark' });
  const bg = () => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  assert.equal(await bg(), 'rgb(21, 22, 26)', 'system dark');
  await page.click('#theme'); // → dark (explicit)
  await page.click('#theme'); // → light
  assert.equal(await bg(), 'rgb(247, 247, 248)');
  assert.match(await page.getAttribute('#theme', 'aria-label'), /light/);
  await page.reload();
  await page.waitForSelector('#app:not([hidden])');
  assert.equal(await bg(), 'rgb(247, 247, 248)', 'remembered across a reload');
  await page.click('#theme'); // → system
  assert.equal(await bg(), 'rgb(21, 22, 26)');
});

test('keyboard: Enter sends, Shift+Enter breaks the line; menu has aria-expanded; focus is visible', async () => {
  const sent = [];
  const fx = { ...richFixture(), onRequest: async (route, req, p) => {
    if (!(req.method() === 'POST' && /messages$/.test(p))) return false;
    sent.push(JSON.parse(req.postData()).text);
    await route.fulfill({ status: 202, contentType: 'application/json', body: JSON.stringify({ runId: 'r1', messageId: 'mx', sequence: 9, status: 'completed' }) });
    return true;
  } };
  const page = await signUp(browser, { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true }, (p) => fakeApi(p, fx));
  await page.waitForSelector('.msg.user');
  await page.focus('#draft');
  await page.keyboard.type('line one');
  await page.keyboard.press('Shift+Enter');
  await page.keyboard.type('line two');
  assert.equal(await page.inputValue('#draft'), 'line one\nline two');
  assert.equal(sent.length, 0);
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => document.getElementById('draft').value === '');
  assert.deepEqual(sent, ['line one\nline two']);
  assert.equal(await page.getAttribute('#menu', 'aria-expanded'), 'false');
  await page.click('#menu');
  assert.equal(await page.getAttribute('#menu', 'aria-expanded'), 'true');
  await page.keyboard.press('Escape');
  assert.equal(await page.getAttribute('#menu', 'aria-expanded'), 'false');
  // Focus is visible on a keyboard-focused button.
  await page.focus('#send');
  await page.keyboard.press('Shift+Tab');
  await page.keyboard.press('Tab');
  const outline = await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
  assert.equal(outline, 'solid');
  // No links used as buttons: every clickable in the app is a <button>.
  assert.equal(await page.$$eval('#app a[href="#"]', (a) => a.length), 0);
});

test('search filters the conversation list', async () => {
  const page = await signUp(browser, {}, (p) => fakeApi(p, richFixture()));
  await page.waitForSelector('#conversations li');
  await page.fill('#conv-search', 'porto');
  const visible = await page.$$eval('#conversations li', (ls) => ls.filter((l) => !l.hidden).map((l) => l.querySelector('button.conv').textContent));
  assert.deepEqual(visible, ['Trip to Porto']);
  await page.fill('#conv-search', 'zzz');
  assert.match(await page.textContent('#conv-empty'), /No conversation title contains “zzz”/);
  await page.fill('#conv-search', '');
  assert.equal(await page.$$eval('#conversations li:not([hidden])', (l) => l.length), 3);
});

test('on a phone the approval prompt is in view', async () => {
  const page = await signUp(browser, { viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true }, (p) => fakeApi(p, richFixture()));
  await page.waitForSelector('.run .approval:not([hidden])');
  await page.waitForTimeout(300);
  const box = await page.locator('.run .approval:not([hidden]) .allow').boundingBox();
  const composer = await page.locator('#composer').boundingBox();
  assert.ok(box && box.y >= 0 && box.y + box.height <= composer.y, `Allow once at ${JSON.stringify(box)}, composer at ${composer.y}`);
  assert.equal(await page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth + 1), false, 'no horizontal scrolling');
});

test('screenshots: 1280×800 and 390×844, light and dark', async () => {
  for (const [w, h] of [[1280, 800], [390, 844]]) {
    for (const scheme of ['light', 'dark']) {
      const page = await signUp(browser, { viewport: { width: w, height: h }, colorScheme: scheme, deviceScaleFactor: 1, isMobile: w < 500, hasTouch: w < 500 },
        (p) => fakeApi(p, richFixture()));
      await page.waitForSelector('.msg.assistant .code .hljs-keyword');
      await page.waitForSelector('.run .approval:not([hidden])');
      await page.waitForTimeout(300);
      await shot(page, `chat-${w}x${h}-${scheme}`);
      // The top of the conversation (the rich answer) as well.
      await page.evaluate(() => { document.getElementById('messages').scrollTop = 0; });
      await page.waitForTimeout(100);
      await shot(page, `chat-top-${w}x${h}-${scheme}`);
      const empty = await signUp(browser, { viewport: { width: w, height: h }, colorScheme: scheme, isMobile: w < 500, hasTouch: w < 500 });
      await empty.waitForSelector('#messages .empty');
      await shot(empty, `empty-${w}x${h}-${scheme}`);
      assert.deepEqual(page.errors, []);
      await page.context().close();
      await empty.context().close();
    }
  }
});
