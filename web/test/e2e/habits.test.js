// Issue 34: the chat habits people bring from other chat apps. Edit, regenerate and retry
// as branches (‹ 1/2 ›), links and export, and the rough edges, through a scripted /api
// (fake.js; sign-in is real) and, for edit and retry end to end, the real dev stack.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { BASE, launch, signUp, shot, send, waitRun } from './helpers.js';
import { fakeApi, run, ev, events } from './fake.js';
import { shownTexts, disabledLink, placeholderFit, streamingTail } from '../checks.js';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

const conv = (id, title) => ({ id, title, lastActivityAt: '2026-01-01T10:00:00Z', createdAt: '2026-01-01T10:00:00Z' });
const msg = (id, sequence, role, text, runId, parentId) => ({ id, sequence, role, text, runId, parentId, createdAt: '2026-01-01T10:00:00Z' });
const SIZES = [[1280, 800], [390, 844]];
const ctxFor = ([w, h]) => ({ viewport: { width: w, height: h }, isMobile: w < 500, hasTouch: w < 500, acceptDownloads: true });

/** A conversation whose second message was edited once (m3 beside m2), a research one, and one with a failed run. */
function fixture(sent) {
  return {
    conversations: [conv('c1', 'Trip to Porto'), conv('c2', 'Reading list'), conv('c3', 'Broken')],
    messages: {
      c1: [msg('m1', 1, 'user', 'Plan a trip', 'r1'), msg('a1', 2, 'assistant', 'Day 1: the river.', 'r1'),
        msg('m2', 3, 'user', 'Make it two days', 'r2'), msg('a2', 4, 'assistant', 'Two days: river, then wine.', 'r2'),
        msg('m3', 5, 'user', 'Make it three days', 'r3', 'm1'), msg('a3', 6, 'assistant', 'Three days: river, wine, beach. ![a map of Porto](http://127.0.0.1:9/map.png) [run me](javascript:alert(1))', 'r3')],
      c2: [msg('m4', 1, 'user', 'Find papers on sleep', 'r4'), msg('a4', 2, 'assistant', 'Here are three.', 'r4')],
      c3: [msg('m5', 1, 'user', 'Do the thing #fail', 'r5')],
    },
    runs: { c1: [run('r3', { messageId: 'm3' }), run('r2', { messageId: 'm2' }), run('r1', { messageId: 'm1' })],
      c2: [run('r4', { messageId: 'm4', role: 'research', conversationId: 'c2' })],
      c3: [run('r5', { messageId: 'm5', status: 'failed', error: 'the model server answered 500', conversationId: 'c3' })] },
    events: { r4: events(ev('message.delta', { text: 'Here are three.' }), ev('run.completed', {})),
      r5: events(ev('run.failed', { error: 'the model server answered 500' })) },
    onRequest: async (route, req, p) => {
      if (req.method() === 'POST' && /messages$/.test(p)) {
        const body = JSON.parse(req.postData());
        sent.push(body);
        await route.fulfill({ status: 202, contentType: 'application/json', body: JSON.stringify({ runId: 'r-new', messageId: 'm-new', sequence: 20, status: 'queued', role: body.role }) });
        return true;
      }
      if (p === '/api/conversations/search') {
        const q = new URL(req.url()).searchParams.get('q');
        const results = q === 'two days' ? [{ messageId: 'm2', conversationId: 'c1', conversationTitle: 'Trip to Porto', role: 'user', runId: 'r2', sequence: 3,
          snippet: [{ text: 'Make it ' }, { text: 'two', hit: true }, { text: ' ' }, { text: 'days', hit: true }, { text: ' <b>not bold</b><img src=x onerror=alert(1)>' }] }] : [];
        await route.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify({ results, next: '' }) });
        return true;
      }
      if (p === '/api/artifacts') {
        await route.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify({ artifacts: [{ id: 'f1', runId: 'r3', filename: 'itinerary.md', size: 321, mimeType: 'text/markdown' }], next: '' }) });
        return true;
      }
      return false;
    },
  };
}

const shown = (page) => page.evaluate(shownTexts);

for (const size of SIZES) {
  test(`versions: ‹ 1/2 › moves between an edit and the original, each with its answer; edit, regenerate, ArrowUp (${size.join('×')})`, async () => {
    const sent = [];
    const page = await signUp(browser, ctxFor(size), (p) => fakeApi(p, fixture(sent)));
    await page.waitForSelector('.msg.user .versions');
    assert.equal(new URL(page.url()).pathname, '/c/c1', 'the open conversation is in the address');
    let texts = await shown(page);
    assert.deepEqual(texts.slice(0, 3), ['Plan a trip', 'Day 1: the river.', 'Make it three days'], texts.join(' | '));
    assert.match(texts[3], /^Three days/);
    assert.equal(await page.textContent('.msg.user[data-id="m3"] .ver-pos'), '2/2');
    await page.click('.msg.user[data-id="m3"] .ver-prev');
    await page.waitForSelector('.msg.user[data-id="m2"]');
    texts = await shown(page);
    assert.deepEqual(texts, ['Plan a trip', 'Day 1: the river.', 'Make it two days', 'Two days: river, then wine.']);
    assert.equal(await page.textContent('.msg.user[data-id="m2"] .ver-pos'), '1/2');
    await shot(page, `habits-versions-${size[0]}`);
    // Coming back to the tab re-reads the lists: the version chosen stays.
    await page.evaluate(() => window.dispatchEvent(new Event('focus')));
    await page.waitForTimeout(1000);
    assert.equal(await page.textContent('.msg.user[data-id="m2"] .ver-pos'), '1/2');

    // A new message follows the version shown.
    await page.fill('#draft', 'And a budget?');
    await page.press('#draft', 'Enter');
    await page.waitForFunction(() => document.querySelectorAll('.msg.user').length === 3);
    assert.equal(sent.at(-1).parentId, 'm2');

    // ArrowUp in the empty box edits the last message: a sibling of it (same parent).
    await page.focus('#draft');
    await page.keyboard.press('ArrowUp');
    assert.equal(await page.inputValue('#draft'), 'And a budget?');
    assert.ok(await page.$('#composer.editing'));
    await page.keyboard.press('Escape');
    assert.equal(await page.inputValue('#draft'), '', 'Escape leaves the edit');
    await page.click('.msg.user[data-id="m2"] .edit');
    await page.fill('#draft', 'Make it two days, by train');
    await page.press('#draft', 'Enter');
    await page.waitForSelector('#composer:not(.editing)');
    assert.deepEqual({ text: sent.at(-1).text, parentId: sent.at(-1).parentId }, { text: 'Make it two days, by train', parentId: 'm1' });

    // Regenerate: the same text again beside it, as the same or another kind of work.
    const n = sent.length;
    await page.fill('#draft', 'a draft in progress');
    await page.locator('.msg.assistant:not([hidden]) .regenerate').first().click();
    for (let i = 0; i < 50 && sent.length === n; i++) await page.waitForTimeout(100);
    assert.deepEqual({ text: sent.at(-1).text, parentId: sent.at(-1).parentId, role: sent.at(-1).role }, { text: 'Plan a trip', parentId: 'root', role: 'chat' });
    const before = sent.length;
    await page.locator('.msg.assistant:not([hidden]) .regenerate-as').first().selectOption('research');
    for (let i = 0; i < 50 && sent.length === before; i++) await page.waitForTimeout(100);
    assert.equal(sent.at(-1).role, 'research');
    assert.equal(await page.inputValue('#draft'), 'a draft in progress', 'regenerating keeps the draft');
    assert.notEqual(sent.at(-1).requestId, sent.at(-2).requestId);
    assert.deepEqual(page.errors, []);
  });
}

test('retry: a failed run offers Retry, sent as a new run linked to it', async () => {
  const sent = [];
  const page = await signUp(browser, ctxFor(SIZES[0]), (p) => fakeApi(p, fixture(sent)));
  await page.goto(BASE + '/c/c3');
  await page.waitForSelector('.run .retry');
  await shot(page, 'habits-retry-1280');
  await page.click('.run .retry');
  for (let i = 0; i < 50 && !sent.length; i++) await page.waitForTimeout(100);
  assert.deepEqual({ text: sent[0].text, parentId: sent[0].parentId, retryOf: sent[0].retryOf }, { text: 'Do the thing #fail', parentId: 'root', retryOf: 'r5' });
});

test('links: /c/<id> with back and forward; a deep link survives signing in; the picker keeps the kind of work', async () => {
  const sent = [];
  const page = await signUp(browser, ctxFor(SIZES[0]), (p) => fakeApi(p, fixture(sent)));
  await page.waitForSelector('.msg.user[data-id="m3"]');
  assert.equal(await page.inputValue('#role'), 'chat');
  await page.click('button.conv[data-id="c2"]');
  await page.waitForSelector('.msg.user[data-id="m4"]');
  assert.equal(new URL(page.url()).pathname, '/c/c2');
  assert.equal(await page.inputValue('#role'), 'research', 'a research conversation reopens as research');
  await page.goBack();
  await page.waitForSelector('.msg.user[data-id="m3"]');
  assert.equal(new URL(page.url()).pathname, '/c/c1');
  await page.goForward();
  await page.waitForSelector('.msg.user[data-id="m4"]');

  await page.click('#signout');
  await page.waitForSelector('#auth:not([hidden])');
  await page.goto(BASE + '/c/c2');
  await page.waitForSelector('#auth:not([hidden])');
  await page.fill('#email', page.email);
  await page.fill('#password', 'password-' + page.email);
  await page.click('#auth-submit');
  await page.waitForSelector('.msg.user[data-id="m4"]');
  assert.equal(new URL(page.url()).pathname, '/c/c2');
});

test('export: Markdown and JSON of the branch shown, files listed', async () => {
  const sent = [];
  const page = await signUp(browser, ctxFor(SIZES[0]), (p) => fakeApi(p, fixture(sent)));
  await page.waitForSelector('.msg.user[data-id="m3"]');
  const [md] = await Promise.all([page.waitForEvent('download'), page.click('#export-md')]);
  assert.equal(md.suggestedFilename(), 'Trip-to-Porto.md');
  const text = await readFile(await md.path(), 'utf8');
  assert.match(text, /^# Trip to Porto/);
  assert.match(text, /> Make it three days/);
  assert.doesNotMatch(text, /two days/, 'only the branch shown');
  assert.match(text, /- itinerary\.md \(321 bytes\)/);
  const [js] = await Promise.all([page.waitForEvent('download'), page.click('#export-json')]);
  const doc = JSON.parse(await readFile(await js.path(), 'utf8'));
  assert.equal(doc.format, 'private-assistant.conversation.v1');
  assert.equal(doc.messages.length, 4);
  assert.equal(doc.messages[2].versions, 2);
  assert.equal(doc.messages[3].artifacts[0].filename, 'itinerary.md');
});

test('rough edges: image placeholder never fetched, disabled links as text, SVG icons, in-app confirm, counter, help, shortcuts', async () => {
  const sent = [];
  const fetched = [];
  const page = await signUp(browser, { ...ctxFor(SIZES[0]), permissions: ['clipboard-read', 'clipboard-write'] }, (p) => {
    p.on('request', (r) => { if (r.url().includes('map.png')) fetched.push(r.url()); });
    return fakeApi(p, fixture(sent));
  });
  await page.waitForSelector('.msg.assistant .img-placeholder');
  assert.equal(await page.textContent('.msg.assistant .img-placeholder'), 'Image: a map of Porto');
  assert.equal(await page.$$eval('.msg img', (x) => x.length), 0);
  assert.deepEqual(fetched, []);
  const link = await page.evaluate(disabledLink);
  assert.equal(link.text, 'run me');
  assert.equal(link.color, link.body, 'a disabled link looks like text');
  assert.equal(link.deco, 'none');

  assert.equal(await page.$$eval('.conv-act.delete svg', (x) => x.length), 3);
  assert.doesNotMatch(await page.textContent('#conversations'), /🗑|✎/);
  await page.hover('.conv-item[data-id="c2"]');
  await page.click('.conv-item[data-id="c2"] .conv-act.delete');
  await page.waitForSelector('dialog[open]');
  assert.match(await page.textContent('dialog[open]'), /Reading list/);
  await shot(page, 'habits-confirm-1280');
  await page.keyboard.press('Escape');
  await page.waitForSelector('dialog', { state: 'detached' });
  assert.ok(await page.$('.conv-item[data-id="c2"]'), 'cancelled: nothing deleted');

  // The counter appears before the limit and stops a message over it.
  await page.fill('#draft', 'x'.repeat(14000));
  assert.equal(await page.textContent('#counter'), '14,000 / 16,384');
  await page.fill('#draft', 'x'.repeat(17000));
  assert.match(await page.textContent('#counter'), /17,000 \/ 16,384: 616 too many/);
  const n = sent.length;
  await page.press('#draft', 'Enter');
  assert.match(await page.textContent('#composer-status'), /too long/);
  assert.equal(sent.length, n, 'not sent');
  await page.fill('#draft', '');
  assert.equal(await page.textContent('#composer-status'), '', 'the refusal goes once the message fits');

  // Shortcuts, listed in the help dialog.
  await page.click('#messages');
  await page.keyboard.press('?');
  await page.waitForSelector('dialog.help[open]');
  const help = await page.textContent('dialog.help');
  for (const k of ['Ctrl+Shift+O', 'Ctrl+K', 'Esc', 'Ctrl+Shift+C']) assert.ok(help.includes(k), k);
  await shot(page, 'habits-help-1280');
  await page.keyboard.press('Escape');
  await page.keyboard.press('Control+Shift+C');
  await page.waitForFunction(() => /Copied/.test(document.getElementById('composer-status').textContent));
  assert.match(await page.evaluate(() => navigator.clipboard.readText()), /^Three days/);
  await page.keyboard.press('Control+k');
  assert.equal(await page.evaluate(() => document.activeElement.id), 'conv-search');
  await page.keyboard.press('Control+Shift+O');
  await page.waitForSelector('#messages .empty');
  assert.equal(new URL(page.url()).pathname, '/');
  assert.deepEqual(page.errors, []);
});

test('answers kept in order: a message written while an answer streams waits for it', async () => {
  const sent = [];
  const fx = fixture(sent);
  fx.runs.c2 = [run('r4', { messageId: 'm4', status: 'running', terminal: false, conversationId: 'c2' })];
  fx.events.r4 = events(ev('run.status', { status: 'running' }), ev('message.delta', { text: 'Here are' }));
  const page = await signUp(browser, ctxFor(SIZES[0]), (p) => fakeApi(p, fx));
  await page.goto(BASE + '/c/c2');
  await page.waitForSelector('.msg.assistant:not([hidden])');
  await page.fill('#draft', 'and one more');
  await page.press('#draft', 'Enter');
  await page.waitForFunction(() => /when the answer being written finishes/.test(document.getElementById('composer-status').textContent));
  assert.equal(sent.length, 0);
  assert.equal(await page.textContent('#send'), 'Send now');
  await page.click('#send');
  for (let i = 0; i < 50 && !sent.length; i++) await page.waitForTimeout(100);
  assert.equal(sent[0].parentId, 'm4');
});

test('the streaming tail joins its paragraph', async () => {
  const page = await signUp(browser, ctxFor(SIZES[0]), (p) => fakeApi(p, fixture([])));
  const where = await page.evaluate(streamingTail);
  assert.deepEqual(where, { parent: 'P', text: 'Second starts and goes on' });
});

test('sign-in page says what this is; no ☰ there; no console errors on a normal load (390×844 and 1280×800)', async () => {
  for (const size of SIZES) {
    const ctx = await browser.newContext(ctxFor(size));
    const page = await ctx.newPage();
    const errors = [];
    page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(BASE);
    await page.waitForSelector('#auth:not([hidden])');
    assert.match(await page.textContent('#about'), /self-hosted AI assistant/);
    assert.equal(await page.isVisible('#menu'), false);
    assert.equal(await page.isVisible('#help'), false);
    await shot(page, `habits-signin-${size[0]}`);
    await page.waitForTimeout(500);
    assert.deepEqual(errors, [], 'a signed-out load logs nothing');
    await ctx.close();
  }
  const page = await signUp(browser, ctxFor(SIZES[1]), (p) => fakeApi(p, fixture([])));
  const errors = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  await page.reload();
  await page.waitForSelector('.msg.user');
  assert.equal(await page.isVisible('#menu'), true);
  // The placeholder fits the box at 390 px.
  const fit = await page.evaluate(placeholderFit);
  assert.ok(fit.need <= fit.have, `placeholder ${fit.need} px in ${fit.have} px`);
  await shot(page, 'habits-composer-390');
  await page.waitForTimeout(500);
  assert.deepEqual(errors, [], 'a signed-in load logs nothing');
});

test('edit and retry end to end: admitted once each, the earlier version kept', async () => {
  const page = await signUp(browser, ctxFor(SIZES[0]));
  await send(page, 'hello there');
  await waitRun(page, 'completed');
  await page.waitForSelector('.msg.assistant:not([hidden]) .regenerate:not([hidden])');
  await page.focus('#draft');
  await page.keyboard.press('ArrowUp');
  await page.fill('#draft', 'hello again');
  await page.press('#draft', 'Enter');
  await page.waitForSelector('.msg.user .ver-pos');
  await waitRun(page, 'completed');
  assert.equal(await page.textContent('.msg.user .ver-pos'), '2/2');
  assert.equal((await shown(page))[0], 'hello again');
  await page.click('.msg.user .ver-prev');
  await page.waitForFunction(() => document.querySelector('.msg.user .ver-pos')?.textContent === '1/2');
  assert.equal((await shown(page))[0], 'hello there');
  assert.equal((await shown(page)).length, 2, 'the first version with its own answer');

  await page.click('.msg.user .ver-next');
  await page.waitForFunction(() => document.querySelector('.msg.user .ver-pos')?.textContent === '2/2');
  await send(page, 'now break #fail');
  await waitRun(page, 'failed');
  await page.click('.run .redo:not([hidden]) .retry');
  await page.waitForFunction(() => [...document.querySelectorAll('.msg.user .ver-pos')].some((x) => x.textContent === '2/2' && x.closest('.msg').innerText.includes('#fail')));
  await waitRun(page, 'failed');
  await page.reload();
  await page.waitForSelector('.msg.user .ver-pos');
  const pos = await page.$$eval('.msg.user .ver-pos', (x) => x.map((e) => e.textContent));
  assert.deepEqual(pos, ['2/2', '2/2'], 'both branches survive a reload');
  // A link to a conversation that is not there (or another user's) says so.
  await page.goto(BASE + '/c/c0000000000000000000000000000000');
  await page.waitForFunction(() => /does not exist/.test(document.getElementById('chat-error').textContent));
  assert.deepEqual(page.errors, []);
});

test('search: matched words marked as text; a hit opens the branch that holds it', async () => {
  const sent = [];
  const page = await signUp(browser, ctxFor(SIZES[0]), (p) => fakeApi(p, fixture(sent)));
  await page.waitForSelector('.msg.user[data-id="m3"]');
  await page.fill('#conv-search', 'two days');
  await page.waitForSelector('#hits button.hit');
  assert.deepEqual(await page.$$eval('#hits mark', (m) => m.map((x) => x.textContent)), ['two', 'days']);
  assert.match(await page.textContent('#hits .hit-snippet'), /<b>not bold<\/b><img src=x/, 'shown as text');
  assert.equal(await page.$$eval('#hits b, #hits img', (x) => x.length), 0);
  await shot(page, 'habits-search-1280');
  await page.click('#hits button.hit');
  await page.waitForSelector('.msg.user[data-id="m2"].flash');
  assert.equal(await page.textContent('.msg.user[data-id="m2"] .ver-pos'), '1/2', 'the other version, found');
  await page.fill('#conv-search', 'zz');
  await page.waitForFunction(() => /No message contains/.test(document.getElementById('hits').textContent));
  assert.deepEqual(page.errors, []);
});

test("search end to end: what was said and answered, only the caller's", async () => {
  const page = await signUp(browser, ctxFor(SIZES[1]));
  await send(page, 'tell me about zebras please');
  await waitRun(page, 'completed');
  await send(page, 'and about giraffes');
  await waitRun(page, 'completed');
  const other = await signUp(browser, ctxFor(SIZES[0]));
  await send(other, 'my own zebras');
  await waitRun(other, 'completed');
  await page.click('#menu');
  await page.fill('#conv-search', 'zebras');
  await page.waitForSelector('#hits button.hit');
  const hits = await page.$$eval('#hits .hit-snippet', (x) => x.map((e) => e.textContent));
  assert.equal(hits.length, 2, hits.join(' | ')); // the message and its answer ("You said: …")
  assert.ok(hits.every((h) => !/my own/.test(h)));
  await shot(page, 'habits-search-390');
  await page.locator('#hits button.hit').last().click();
  await page.waitForSelector('.msg.flash');
  assert.deepEqual([...page.errors, ...other.errors], []);
});
