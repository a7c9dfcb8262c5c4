// Issue 17 item 5: files attached to a message — picked, dropped or pasted; chips with
// name, size and remove; limits said before anything uploads; uploaded with the user's own
// Appwrite session to the private uploads bucket; shown on the sent message (and after a
// reload); the agent gave them to the run before it started (plain chat: their text; the
// dev stack's scripted model echoes its input, so the answer shows it).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { launch, signUp, waitRun, lastAnswer, reload, shot } from './helpers.js';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

const text = (name, body, type = 'text/plain') => ({ name, mimeType: type, buffer: Buffer.from(body) });

/** Drops (or pastes) files made in the page onto a target, as a browser delivers them. */
async function deliver(page, kind, files) {
  await page.evaluate(({ kind, files }) => {
    const dt = new DataTransfer();
    for (const f of files) dt.items.add(new File([f.body], f.name, { type: f.type }));
    if (kind === 'drop') {
      const c = document.getElementById('composer');
      c.dispatchEvent(new DragEvent('dragover', { dataTransfer: dt, bubbles: true, cancelable: true }));
      c.dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
    } else {
      document.getElementById('draft').dispatchEvent(new ClipboardEvent('paste', { clipboardData: dt, bubbles: true, cancelable: true }));
    }
  }, { kind, files });
}

const chips = (page) => page.$$eval('#attachments .chip', (l) => l.map((c) => ({ name: c.querySelector('.name').textContent, meta: c.querySelector('.meta').textContent, state: c.dataset.state })));
const status = (page) => page.textContent('#composer-status');

async function waitReady(page, n) {
  await page.waitForFunction((n) => {
    const c = [...document.querySelectorAll('#attachments .chip')];
    return c.length === n && c.every((x) => x.dataset.state === 'ready');
  }, n, { timeout: 15000 });
}

test('attach by picker, drop and paste; limits; remove; send; shown after reload; the model gets the file', async () => {
  const page = await signUp(browser, { viewport: { width: 1280, height: 800 } });
  // The picker: the Attach button opens the system file chooser.
  const [chooser] = await Promise.all([page.waitForEvent('filechooser'), page.click('#attach')]);
  assert.equal(chooser.isMultiple(), true);
  await chooser.setFiles([text('tides.txt', 'High tide at 14:07, low at 20:19.\n')]);
  await waitReady(page, 1);
  // Drop and paste go to the same list.
  await deliver(page, 'drop', [{ name: 'data.csv', type: 'text/csv', body: 'a,b\n1,2\n' }]);
  await deliver(page, 'paste', [{ name: 'notes.md', type: 'text/markdown', body: '# notes\n' }]);
  await waitReady(page, 3);
  const c = await chips(page);
  assert.deepEqual(c.map((x) => x.name), ['tides.txt', 'data.csv', 'notes.md']);
  assert.match(c[0].meta, /^\d+ B$/);

  // Limits are said before anything uploads: a type the bucket refuses, an oversized file.
  await page.setInputFiles('#file-input', [{ name: 'tool.exe', mimeType: 'application/octet-stream', buffer: Buffer.from('MZ') }]);
  assert.match(await status(page), /tool\.exe: this type of file cannot be attached/);
  assert.equal(await page.$eval('#composer-status', (e) => e.classList.contains('bad')), true);
  await page.setInputFiles('#file-input', [{ name: 'huge.txt', mimeType: 'text/plain', buffer: Buffer.alloc(10 * 1024 * 1024 + 1, 120) }]);
  assert.match(await status(page), /huge\.txt is 10\.0 MiB; a file may be at most 10\.0 MiB/);
  await page.setInputFiles('#file-input', [text('a.txt', 'a'), text('b.txt', 'b'), text('c.txt', 'c')]);
  assert.match(await status(page), /c\.txt: a message carries at most 5 files/);
  await waitReady(page, 5);

  // Remove with the keyboard: the chip's button is named for its file, and focus moves on.
  await page.focus('#attachments .chip:nth-child(5) .remove');
  assert.equal(await page.getAttribute('#attachments .chip:nth-child(5) .remove', 'aria-label'), 'Remove b.txt');
  await page.keyboard.press('Enter');
  await page.focus('#attachments .chip:nth-child(4) .remove');
  await page.keyboard.press('Enter');
  assert.deepEqual((await chips(page)).map((x) => x.name), ['tides.txt', 'data.csv', 'notes.md']);
  assert.match(await status(page), /a\.txt removed/);
  assert.equal(await page.evaluate(() => document.activeElement?.getAttribute('aria-label')), 'Remove notes.md');
  await shot(page, 'attach-composer-1280x800-light');

  // Only the uploader can read the file: another account's session cannot.
  await page.waitForFunction(async () => {
    const c = new window.Appwrite.Client().setEndpoint(window.PA_CONFIG.endpoint).setProject(window.PA_CONFIG.project);
    return (await new window.Appwrite.Storage(c).listFiles({ bucketId: 'uploads' })).total === 3;
  }, null, { timeout: 10000, polling: 200 });
  const ids = await page.evaluate(async () => {
    const c = new window.Appwrite.Client().setEndpoint(window.PA_CONFIG.endpoint).setProject(window.PA_CONFIG.project);
    const list = await new window.Appwrite.Storage(c).listFiles({ bucketId: 'uploads' });
    return list.files.map((f) => ({ id: f.$id, perms: f.$permissions }));
  });
  assert.equal(ids.length, 3, 'the removed files were deleted from the bucket');
  const me = await page.evaluate(async () => (await new window.Appwrite.Account(new window.Appwrite.Client().setEndpoint(window.PA_CONFIG.endpoint).setProject(window.PA_CONFIG.project)).get()).$id);
  for (const f of ids) assert.deepEqual(f.perms, [`read("user:${me}")`, `delete("user:${me}")`]);
  const other = await signUp(browser);
  const seen = await other.evaluate(async (id) => {
    const c = new window.Appwrite.Client().setEndpoint(window.PA_CONFIG.endpoint).setProject(window.PA_CONFIG.project);
    try { await new window.Appwrite.Storage(c).getFile({ bucketId: 'uploads', fileId: id }); return 'read'; } catch (e) { return String(e.code); }
  }, ids[0].id);
  assert.equal(seen, '404');
  await other.context().close();

  // Send: the message shows its files; the run's input named their paths.
  await page.fill('#draft', 'When is high tide? See the file.');
  await page.click('#send');
  await page.waitForSelector('.msg.user .attachments li');
  assert.deepEqual(await page.$$eval('.msg.user .attachments .name', (l) => l.map((x) => x.textContent)), ['tides.txt', 'data.csv', 'notes.md']);
  assert.equal(await page.$$eval('#attachments .chip', (l) => l.length), 0, 'the composer is empty again');
  await waitRun(page, 'completed');
  // Plain chat (the direct harness, no file tools) is given the text of text files; the
  // dev stack's model echoes its input, so the answer holds what only the file says.
  const answer = await lastAnswer(page);
  assert.match(answer, /Attached files/);
  assert.match(answer, /High tide at 14:07, low at 20:19/);
  assert.doesNotMatch(answer, /key|secret|password|http|\/tmp\//i, 'no credential, address or host path');

  // After a reload the names come from the user's own storage session.
  await reload(page);
  await page.waitForFunction(() => [...document.querySelectorAll('.msg.user .attachments .name')].map((x) => x.textContent).join(',') === 'tides.txt,data.csv,notes.md');
  assert.match(await page.textContent('.msg.user .attachments'), /tides\.txt\s+\d+ B/);
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

test('a message with files that are still uploading waits for them; a failed upload blocks sending with a reason', async () => {
  const page = await signUp(browser);
  // The upload of this file is held until the test lets it go.
  let release;
  const held = new Promise((r) => { release = r; });
  await page.route('**/storage/buckets/uploads/files', async (route) => { await held; await route.continue(); });
  await page.setInputFiles('#file-input', [text('slow.txt', 'slow but sure')]);
  await page.fill('#draft', 'Read slow.txt');
  await page.click('#send');
  await page.waitForFunction(() => /Waiting for the files to finish uploading/.test(document.getElementById('composer-status').textContent));
  assert.equal(await page.$$eval('.msg.user', (l) => l.length), 0, 'not sent while uploading');
  release();
  await page.waitForSelector('.msg.user .attachments li');
  await waitRun(page, 'completed');
  await page.unroute('**/storage/buckets/uploads/files');

  await page.route('**/storage/buckets/uploads/files', (route) => route.abort('failed'));
  await page.setInputFiles('#file-input', [text('lost.txt', 'never arrives')]);
  await page.waitForSelector('#attachments .chip[data-state=failed]');
  assert.match(await page.textContent('#attachments .chip'), /not uploaded/);
  await page.fill('#draft', 'Read lost.txt');
  await page.click('#send');
  await page.waitForFunction(() => /lost\.txt could not be uploaded; remove it/.test(document.getElementById('composer-status').textContent));
  assert.equal(await page.$$eval('.msg.user', (l) => l.length), 1, 'the second message was not sent');
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

test('a message with files sent in another tab shows its files here too (change feed)', async () => {
  const a = await signUp(browser);
  await a.fill('#draft', 'first');
  await a.click('#send');
  await waitRun(a, 'completed');
  const b = await a.context().newPage();
  b.errors = [];
  b.on('pageerror', (e) => b.errors.push(e.message));
  await b.goto(a.url());
  await b.waitForSelector('.msg.user');
  await b.setInputFiles('#file-input', [text('from-b.txt', 'sent from tab B')]);
  await waitReady(b, 1);
  await b.fill('#draft', 'with a file, from tab B');
  await b.click('#send');
  await a.waitForFunction(() => [...document.querySelectorAll('.msg.user .attachments .name')].some((x) => x.textContent === 'from-b.txt'), null, { timeout: 10000 });
  const shown = await a.$$eval('.msg.user .attachments', (l) => l.map((x) => x.textContent));
  assert.equal(shown.length, 1, 'only the second message carries files');
  assert.match(shown[0], /from-b\.txt\s+15 B/);
  assert.deepEqual([...a.errors, ...b.errors], []);
  await a.context().close();
});

test('screenshots with attachments: 1280×800 and 390×844, light and dark', async () => {
  for (const [w, h] of [[1280, 800], [390, 844]]) {
    for (const scheme of ['light', 'dark']) {
      const page = await signUp(browser, { viewport: { width: w, height: h }, colorScheme: scheme, isMobile: w < 500, hasTouch: w < 500 });
      await page.setInputFiles('#file-input', [text('quarterly report.txt', 'Revenue rose 12%.\n'), text('figures.csv', 'q,rev\n1,10\n2,12\n')]);
      await waitReady(page, 2);
      await page.fill('#draft', 'Summarise the attached report');
      await page.click('#send');
      await waitRun(page, 'completed');
      // A second set waiting in the composer, to show the chips as well.
      await page.setInputFiles('#file-input', [text('notes.md', '# Notes\n'), text('a-rather-long-file-name-for-the-chip.json', '{}')]);
      await waitReady(page, 2);
      await page.waitForTimeout(200);
      await shot(page, `attach-${w}x${h}-${scheme}`);
      assert.equal(await page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth + 1), false, 'no horizontal scrolling');
      assert.deepEqual(page.errors, []);
      await page.context().close();
    }
  }
});
