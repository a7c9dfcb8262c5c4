import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, statSync } from 'node:fs';
import { launch, signUp, send, waitRun, lastAnswer, BASE } from './helpers.js';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

// A member's first research or coding job starts their own Hermes (make dev runs the real
// one per member): seconds on an idle host, tens of seconds on a loaded 2-core one.
const HERMES_START = 120000;

test('sign up, send a message and watch it stream', async () => {
  const page = await signUp(browser);
  await send(page, 'hello from the browser');
  await waitRun(page, 'completed');
  assert.equal((await lastAnswer(page)).trim(), 'You said: hello from the browser');
  assert.deepEqual(page.errors, []);
  // Sign out and in again: the conversation is still there.
  await page.click('#signout');
  await page.waitForSelector('#auth:not([hidden])');
  await page.fill('#email', page.email);
  await page.fill('#password', 'password-' + page.email);
  await page.click('#auth-submit');
  await page.waitForSelector('.msg.user');
  assert.match(await page.textContent('#messages'), /hello from the browser/);
});

test('reload mid-stream resumes without gaps or duplicates', async () => {
  const page = await signUp(browser);
  await send(page, 'tell me a #story');
  await page.waitForFunction(() => (document.querySelector('.msg.assistant:not([hidden])')?.innerText || '').length > 20);
  await page.reload();
  await waitRun(page, 'completed', 30000);
  const want = 'once upon a time there was a careful agent '.repeat(12).trim();
  assert.equal((await lastAnswer(page)).trim().replace(/\s+/g, ' '), want);
});

test('approve and deny a tool call', async () => {
  const page = await signUp(browser);
  for (const [label, tool] of [['Allow once', true], ['Deny', false]]) {
    await send(page, 'please run #tool', 'coding');
    await page.waitForSelector('.run .approval:not([hidden])', { timeout: HERMES_START });
    assert.match(await page.textContent('.run .approval:not([hidden]) code'), /rm -rf scratch/);
    await page.click(`.run .approval:not([hidden]) button:has-text("${label}")`);
    await waitRun(page, 'completed');
    const card = await page.evaluate(() => [...document.querySelectorAll('.run')].pop().innerText);
    assert.equal(/You allowed/.test(card), tool, card);
    assert.equal(/You denied rm -rf scratch — it was not run/.test(card), !tool, card);
    assert.equal(/denied a command/.test(card), !tool, card);
  }
});

test('Stop in the composer cancels while streaming; the partial answer stays', async () => {
  const page = await signUp(browser);
  await send(page, 'a #long answer please');
  await page.waitForFunction(() => (document.querySelector('.msg.assistant:not([hidden]) .body')?.innerText || '').length > 10);
  assert.equal(await page.isVisible('#stop'), true, 'a stop button while the run streams');
  await page.click('#stop');
  await waitRun(page, 'cancelled', 30000);
  assert.ok((await lastAnswer(page)).length > 0, 'the partial answer stays');
  assert.equal(await page.isVisible('#stop'), false);
  assert.match(await page.evaluate(() => [...document.querySelectorAll('.run')].pop().innerText), /cancelled/);
});

test('download an artifact and compare its bytes', async () => {
  const page = await signUp(browser);
  await send(page, '#research a topic', 'research');
  await waitRun(page, 'completed', HERMES_START);
  await page.waitForSelector('.run .artifacts button.file');
  const fetched = [];
  page.on('request', (r) => { if (/\/artifacts\/[^/]+\/download$/.test(new URL(r.url()).pathname)) fetched.push(new URL(r.url()).pathname); });
  const [dl] = await Promise.all([page.waitForEvent('download'), page.click('.run .artifacts button.file')]);
  assert.ok(fetched.length && fetched.every((p) => p.startsWith('/stream/artifacts/')), `bytes from the stream service, not a function: ${fetched}`);
  const path = await dl.path();
  assert.equal(readFileSync(path, 'utf8'), '# Notes\n\n- first source\n- second source\n');
  assert.equal(dl.suggestedFilename(), 'notes.md');
});

test('model output with XSS payloads renders inert', async () => {
  const page = await signUp(browser);
  const dialogs = [];
  const stray = [];
  page.on('dialog', (d) => { dialogs.push(d.message()); d.dismiss(); });
  page.on('request', (r) => { const u = new URL(r.url()); if (u.origin !== new URL(BASE).origin || u.pathname === '/x') stray.push(r.url()); });
  await send(page, 'show me #xss');
  await waitRun(page, 'completed');
  const found = await page.evaluate(() => {
    const a = [...document.querySelectorAll('.msg.assistant')].pop();
    const bad = [...a.querySelectorAll('*')].filter((n) => /^(SCRIPT|IMG|SVG|IFRAME|OBJECT|EMBED)$/i.test(n.tagName)
      || [...n.attributes].some((x) => /^on/i.test(x.name) || /javascript:/i.test(x.value)));
    return { bad: bad.map((n) => n.outerHTML), text: a.querySelector('.body').innerText };
  });
  assert.equal(dialogs.length, 0, 'no dialog');
  assert.deepEqual(stray, [], 'no request fired');
  assert.deepEqual(found.bad, [], 'no active element or attribute');
  // HTML the model wrote is shown as text, not silently dropped.
  assert.match(found.text, /<script>alert\(1\)<\/script>/);
  assert.match(found.text, /<img src=x onerror=alert\(2\)>/);
  assert.match(await lastAnswer(page), /bold/);
});

test('a second user cannot see the first user\'s conversations', async () => {
  const alice = await signUp(browser);
  await send(alice, 'alice secret note');
  await waitRun(alice, 'completed');
  const bob = await signUp(browser);
  await bob.waitForTimeout(300);
  const text = await bob.textContent('body');
  assert.doesNotMatch(text, /alice secret note/);
  assert.equal(await bob.$$eval('#conversations li', (l) => l.length), 0);
});

test('phone-size viewport', async () => {
  const page = await signUp(browser, { viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true });
  await send(page, 'hello from a phone');
  await waitRun(page, 'completed');
  mkdirSync('../build/screenshots', { recursive: true });
  await page.screenshot({ path: '../build/screenshots/phone.png' });
  assert.ok(statSync('../build/screenshots/phone.png').size > 1000);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth + 1);
  assert.equal(overflow, false, 'no horizontal scrolling on a phone');
});
