// Live on every device (issue 17): the per-user change feed brings conversations created,
// renamed and deleted and messages sent in another tab into an open tab within a second;
// rename and delete conversations from the list.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { launch, signUp, send, waitRun, lastAnswer } from './helpers.js';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

const titles = (page) => page.$$eval('#conversations li button.conv', (b) => b.map((x) => x.textContent));

/** Another tab of the same session, showing the same conversation. */
async function secondTab(a) {
  const b = await a.context().newPage();
  b.errors = [];
  b.on('pageerror', (e) => b.errors.push(e.message));
  await b.goto(a.url());
  await b.waitForSelector('.msg.user');
  return b;
}

/** ms from now until fn holds in page. */
async function within(page, fn, arg) {
  const t0 = Date.now();
  await page.waitForFunction(fn, arg, { timeout: 10000, polling: 'raf' });
  return Date.now() - t0;
}

test('a message sent in another tab shows in this one within a second, and its answer streams', async () => {
  const a = await signUp(browser);
  await send(a, 'from tab A');
  await waitRun(a, 'completed');
  const b = await secondTab(a);
  // Tab A stays in the foreground and is never focused again: only the feed can tell it.
  const sent = b.waitForResponse((r) => /\/messages$/.test(new URL(r.url()).pathname) && r.request().method() === 'POST');
  await send(b, 'from tab B, live');
  await sent;
  const ms = await within(a, () => [...document.querySelectorAll('.msg.user')].some((m) => m.innerText.includes('from tab B, live')));
  console.log(`feed: a message from tab B shown in tab A after ${ms} ms`);
  assert.ok(ms < 1000, `shown in tab A after ${ms} ms`);
  await a.waitForFunction(() => /You said: from tab B, live/.test([...document.querySelectorAll('.msg.assistant:not([hidden]) .body')].pop()?.innerText || ''), null, { timeout: 20000 });
  await waitRun(a, 'completed');
  assert.equal(await a.$$eval('.msg.user', (m) => m.length), 2, 'once, not twice');
  assert.match(await lastAnswer(a), /You said: from tab B, live/);
  // Tab B, which sent it, shows it once too.
  await waitRun(b, 'completed');
  assert.equal(await b.$$eval('.msg.user', (m) => m.length), 2);
  assert.deepEqual([...a.errors, ...b.errors], []);
});

test('conversations created, renamed and deleted in another tab reach this one within a second', async () => {
  const a = await signUp(browser);
  await send(a, 'the first conversation');
  await waitRun(a, 'completed');
  const b = await secondTab(a);
  await b.click('#new-conv');
  await send(b, 'made in tab B');
  let ms = await within(a, () => [...document.querySelectorAll('#conversations li button.conv')].some((x) => x.textContent === 'made in tab B'));
  assert.ok(ms < 3000, `listed in tab A after ${ms} ms`); // from Send: includes creating it
  await waitRun(b, 'completed');

  // Rename the first conversation in tab B (the one tab A shows).
  const first = b.locator('#conversations li', { hasText: 'the first conversation' });
  await first.hover();
  await first.locator('.rename').click();
  await b.fill('#conversations li input.conv-title', 'Renamed in B');
  const renamed = b.waitForResponse((r) => r.request().method() === 'PATCH');
  await b.press('#conversations li input.conv-title', 'Enter');
  await renamed;
  ms = await within(a, () => [...document.querySelectorAll('#conversations li button.conv')].some((x) => x.textContent === 'Renamed in B'));
  console.log(`feed: a rename in tab B shown in tab A after ${ms} ms`);
  assert.ok(ms < 1000, `renamed in tab A after ${ms} ms`);

  // Delete it in tab B: tab A, which shows it, says so and offers a new conversation.
  const deleted = b.waitForResponse((r) => r.request().method() === 'DELETE');
  await b.locator('#conversations li', { hasText: 'Renamed in B' }).locator('.delete').click();
  await b.click('dialog[open] button.danger'); // the app's own confirmation
  assert.equal((await deleted).status(), 204);
  ms = await within(a, () => ![...document.querySelectorAll('#conversations li button.conv')].some((x) => x.textContent === 'Renamed in B'));
  assert.ok(ms < 1000, `gone from tab A after ${ms} ms`);
  await a.waitForSelector('#messages .empty');
  assert.match(await a.textContent('#chat-error'), /deleted in another tab/);
  assert.deepEqual(await titles(a), ['made in tab B']);
  assert.deepEqual([...a.errors, ...b.errors], []);
});

test('rename and delete from the list; both are stored', async () => {
  const page = await signUp(browser);
  await send(page, 'keep me');
  await waitRun(page, 'completed');
  await page.click('#new-conv');
  await send(page, 'delete me');
  await waitRun(page, 'completed');
  // Rename with the keyboard: the ✎ button, type, Enter. Escape keeps the old title.
  const keep = page.locator('#conversations li', { hasText: 'keep me' });
  await keep.locator('.rename').focus();
  await page.keyboard.press('Enter');
  await page.keyboard.type('Kept');
  await page.keyboard.press('Escape');
  assert.deepEqual(await titles(page), ['delete me', 'keep me']);
  await keep.locator('.rename').click();
  await page.fill('#conversations li input.conv-title', 'Kept and renamed');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => [...document.querySelectorAll('#conversations li button.conv')].some((x) => x.textContent === 'Kept and renamed'));
  // Delete the open one: a dismissed confirmation deletes nothing.
  const del = page.locator('#conversations li', { hasText: 'delete me' }).locator('.delete');
  // The confirmation is the app's own dialog (dialog.js), not the browser's confirm().
  await del.click();
  await page.click('dialog[open] button:has-text("Cancel")');
  assert.deepEqual(await titles(page), ['delete me', 'Kept and renamed']);
  await del.click();
  assert.match(await page.textContent('dialog[open]'), /“delete me”/);
  await page.click('dialog[open] button.danger');
  await page.waitForFunction(() => document.querySelectorAll('#conversations li').length === 1);
  await page.waitForSelector('#messages .empty');
  await page.reload();
  await page.waitForSelector('#app:not([hidden])');
  await page.waitForSelector('.msg.user');
  assert.deepEqual(await titles(page), ['Kept and renamed']);
  assert.match(await page.textContent('#messages'), /keep me/);
  assert.deepEqual(page.errors, []);
});
