// Issue 34 items 1–4 in Firefox ESR and WebKit (PA_ENGINE), at 1280×800 and 390×844: the
// habits test/e2e/habits.test.js checks in Chromium, here end to end on the make-dev stack
// (the Hermes double answers "You said: …"; #fail fails, #long streams for long, #research
// saves notes.md). One engine session per size walks them all, each a subtest:
//   1. edit (the Edit button and ArrowUp in the empty box; Escape leaves), ‹ 1/2 › between
//      versions each with its answer, regenerate (the draft kept) and regenerate as another
//      kind of work, retry of a failed run;
//   2. search over what was said: matched words marked, a hit opens the branch that holds it;
//   3. /c/<id> with back and forward, a deep link that survives signing in, export as
//      Markdown and JSON (the files listed);
//   4. the rough edges: a message sent while an answer streams waits for it (Esc stops it),
//      the streaming tail inline, the picker keeping a conversation's kind of work, the counter
//      before the limit, an image in model output as a placeholder never fetched, a disabled
//      link as text, SVG icons, the in-app confirm, the sign-in page saying what this is (no ☰
//      or ? there), the shortcuts and their help, the placeholder fitting a phone, no error on
//      a normal load (no API request refused, nothing thrown or logged as an error).
// chat.test.js runs them in the session its own steps used (one engine session per size),
// on the stack and front of scripts/dev TestWebChatInFirefoxAndWebKit (the front logs the API
// requests it passes on).
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { BASE } from '../e2e/helpers.js';
import { mkdirSync, waitFor } from './driver.js';
import { ENGINE, SHOTS, signUp, signIn, sendAndWatch, waitRun, runCount, requests, catchDownloads, openPanel } from './steps.js';
import { shownTexts, disabledLink, placeholderFit, streamingTail } from '../checks.js';

// A research job on the Hermes double: seconds, more on a loaded 2-core machine.
const RESEARCH = 120000;
// Conversation B as shown: a stopped answer, the message that waited for it, an image and a link.
const B_SHOWN = ['tell me something #long', '/^streaming tokens', 'and one more', 'You said: and one more', '/^see !\\[a map of Porto\\]', '/^You said: see Image: a map of Porto and run me'];
const path = (p) => p.eval(() => location.pathname);
const pos = (p, i = 0) => p.eval((k) => document.querySelectorAll('.msg.user:not([hidden]) .ver-pos')[k]?.textContent || '', i);
/** Waits until the branch shown is these texts (a string: a pattern for that message). */
async function showing(p, want, timeout = 30000) {
  try {
    await p.waitFor((w) => {
      const got = [...document.querySelectorAll('#messages .msg:not([hidden]) .body')].map((b) => b.innerText.trim());
      return got.length === w.length && w.every((x, i) => (x.startsWith('/') ? new RegExp(x.slice(1)).test(got[i]) : x === got[i]));
    }, want, timeout);
  } catch (e) {
    const seen = await p.eval(() => ({ status: document.getElementById('composer-status').textContent, error: document.getElementById('chat-error').textContent,
      cards: [...document.querySelectorAll('.run')].map((c) => `${c.querySelector('.status')?.className}: ${c.textContent.slice(0, 80)}`) })).catch((err) => String(err));
    const log = (await requests().catch(() => [])).slice(-15).map((r) => `${r.method} ${r.path} ${r.status}`);
    e.message += `\nshown: ${JSON.stringify(await p.eval(shownTexts))}; the page: ${JSON.stringify(seen)}; the front's last requests: ${JSON.stringify(log)}`;
    throw e;
  }
}
/** API requests the front answered with an error since `from` (a load that logs a 401 in the console shows here). */
const refused = async (from) => (await requests()).slice(from).filter((r) => r.status >= 400).map((r) => `${r.method} ${r.path} ${r.status}`);

/** habits walks items 1–4 as subtests of t in the engine session p (of that size; downloads: its download folder). */
export async function habits(t, p, { size, downloads }) {
  const label = `${size.width}x${size.height}`;
  const phone = size.width < 720;
  const shot = async (name) => {
    assert.deepEqual(await p.eval(() => [innerWidth, innerHeight]), [size.width, size.height], 'the page keeps its size');
    await p.screenshot(join(SHOTS, `engines-habits-${ENGINE}-${label}-${name}.png`));
  };
  mkdirSync(SHOTS, { recursive: true });
  // Each step starts at the page size asked for (WebKit's MiniBrowser shrinks its page for a
  // bar of downloads, resized as they finish).
  const step = (name, fn) => t.test(name, async () => { await p.fit(); await fn(); });
  let email, convA, convB;
  await step('the sign-in page says what this is; no ☰ or ? there; nothing refused or reported on the load', async () => {
    if (await p.eval(() => !document.getElementById('app').hidden)) {
      await p.click('#signout');
      await p.waitFor(() => !!document.querySelector('#auth:not([hidden])'));
    }
    const from = (await requests()).length;
    await p.goto(BASE + '/');
    await p.waitFor(() => !!document.querySelector('#auth:not([hidden])'));
    assert.match(await p.eval(() => document.getElementById('about').textContent), /self-hosted AI assistant/);
    assert.deepEqual(await p.eval(() => ['menu', 'help'].map((id) => document.getElementById(id).checkVisibility())), [false, false]);
    await shot('signin');
    assert.deepEqual(await refused(from), [], 'a signed-out load has no API request refused');
    assert.deepEqual(await p.errors(), []);
  });

  await step('edit (Edit and ArrowUp; Escape leaves): a new version beside the first, ‹ 1/2 › moves between them, each with its answer', async () => {
    email = await signUp(p);
    await sendAndWatch(p, 'hello there');
    convA = (await path(p)).replace('/c/', '');
    assert.match(convA, /^[A-Za-z0-9._-]+$/, 'the conversation is in the address');
    await p.click('#draft');
    await p.press('ArrowUp');
    assert.deepEqual(await p.eval(() => [document.getElementById('draft').value, document.getElementById('composer').classList.contains('editing')]), ['hello there', true]);
    await p.press('Escape');
    assert.deepEqual(await p.eval(() => [document.getElementById('draft').value, document.getElementById('composer').classList.contains('editing')]), ['', false], 'Escape leaves the edit');
    await p.click('.msg.user .edit');
    await p.waitFor(() => document.getElementById('composer').classList.contains('editing'));
    await p.fill('#draft', 'hello again');
    await p.press('Enter');
    await showing(p, ['hello again', 'You said: hello again']);
    assert.equal(await pos(p), '2/2');
    await p.click('.msg.user .ver-prev');
    await showing(p, ['hello there', 'You said: hello there']);
    assert.equal(await pos(p), '1/2');
    await shot('versions');
    await p.click('.msg.user .ver-next');
    await showing(p, ['hello again', 'You said: hello again']);
  });

  await step('retry: a failed run offers Retry, sent as a new run linked to it', async () => {
    await sendAndWatch(p, 'now break #fail', { status: 'failed' });
    const before = await runCount(p);
    await p.click('.run .redo:not([hidden]) .retry');
    await p.waitFor(() => [...document.querySelectorAll('.msg.user:not([hidden])')].some((m) => m.querySelector('.ver-pos')?.textContent === '2/2' && m.innerText.includes('#fail')));
    await waitRun(p, 'failed', before - 1);
    assert.match(await p.eval(() => [...document.querySelectorAll('.run')].pop().textContent), /A retry of an earlier run/);
    await shot('retry');
  });

  await step('regenerate keeps the draft; regenerate as another kind of work', async () => {
    await p.fill('#draft', 'a draft in progress');
    await p.click('.msg.assistant:not([hidden]) .regenerate:not([hidden])');
    await showing(p, ['hello again', 'You said: hello again']);
    await p.waitFor(() => document.querySelector('.msg.user .ver-pos')?.textContent === '3/3');
    await waitRun(p, 'completed');
    assert.equal(await p.eval(() => document.getElementById('draft').value), 'a draft in progress', 'regenerating keeps the draft');
    await p.select('.msg.assistant:not([hidden]) .regenerate-as', 'research');
    await p.waitFor(() => document.querySelector('.msg.user .ver-pos')?.textContent === '4/4');
    await waitRun(p, 'completed', 0, RESEARCH);
    assert.equal(await p.eval(() => document.getElementById('role').value), 'research', 'the picker follows the conversation');
    // A research job that saves a file, for the export below.
    await p.fill('#draft', '');
    await sendAndWatch(p, '#research a topic', { role: 'research', timeout: RESEARCH });
    await p.waitFor(() => !!document.querySelector('.run .artifacts button.file'), null, 15000);
  });

  await step('answers kept in order: a message sent while an answer streams waits for it; Esc stops the answer, then it goes', async () => {
    await p.press('Control+Shift+O');
    await p.waitFor(() => !!document.querySelector('#messages .empty') && location.pathname === '/');
    await p.select('#role', 'chat');
    await p.fill('#draft', 'tell me something #long');
    await p.press('Enter');
    await p.waitFor(() => /streaming tokens/.test([...document.querySelectorAll('.msg.assistant .body')].pop()?.textContent || ''));
    convB = (await path(p)).replace('/c/', '');
    assert.notEqual(convB, convA);
    await p.fill('#draft', 'and one more');
    await p.press('Enter');
    await p.waitFor(() => /when the answer being written finishes/.test(document.getElementById('composer-status').textContent));
    assert.equal(await p.eval(() => document.getElementById('send').textContent), 'Send now');
    await shot('waiting');
    await p.press('Escape');
    await showing(p, ['tell me something #long', '/^streaming tokens', 'and one more', 'You said: and one more']);
    assert.match(await p.eval(() => document.querySelector('.run .status').className), /cancelled/, 'Esc stopped the answer');
    assert.deepEqual(await p.eval(streamingTail), { parent: 'P', text: 'Second starts and goes on' }, 'the streaming tail joins its paragraph');
  });

  await step('an image in model output is a placeholder with its alt text, never fetched; a disabled link looks like text', async () => {
    const from = (await requests()).length;
    await sendAndWatch(p, `see ![a map of Porto](${BASE}/v1/map.png) and [run me](javascript:alert(1))`);
    assert.equal(await p.eval(() => [...document.querySelectorAll('.msg.assistant .img-placeholder')].pop()?.textContent), 'Image: a map of Porto');
    assert.equal(await p.eval(() => document.querySelectorAll('.msg img').length), 0);
    const link = await p.eval(disabledLink);
    assert.equal(link.text, 'run me');
    assert.equal(link.color, link.body, 'a disabled link looks like text');
    assert.equal(link.deco, 'none');
    await shot('image');
    assert.deepEqual((await requests()).slice(from).filter((r) => r.path.includes('map.png')), [], 'the image was never fetched');
  });

  await step('links: /c/<id> with back and forward; the picker keeps each conversation’s kind of work', async () => {
    await openPanel(p);
    await p.click(`button.conv[data-id="${convA}"]`);
    await showing(p, ['hello again', '/.', '#research a topic', '/notes\\.md']);
    assert.equal(await path(p), `/c/${convA}`);
    assert.equal(await p.eval(() => document.getElementById('role').value), 'research', 'a research conversation reopens as research');
    await p.back();
    await showing(p, B_SHOWN);
    assert.equal(await path(p), `/c/${convB}`);
    assert.equal(await p.eval(() => document.getElementById('role').value), 'chat');
    await p.forward();
    await showing(p, ['hello again', '/.', '#research a topic', '/notes\\.md']);
    assert.equal(await path(p), `/c/${convA}`);
    assert.equal(await p.eval(() => document.getElementById('role').value), 'research');
  });

  await step('export: Markdown and JSON of the branch shown, the files listed', async () => {
    await catchDownloads(p);
    await p.click('#export-md');
    await p.waitFor(() => window.__downloads.length === 1);
    await p.click('#export-json');
    const [md, js] = await p.waitFor(() => window.__downloads.length === 2 && window.__downloads);
    assert.equal(md.name, 'hello-there.md');
    assert.match(md.text, /^# hello there\n/);
    assert.match(md.text, /> hello again\n/);
    assert.doesNotMatch(md.text, /> hello there/, 'only the branch shown');
    assert.match(md.text, /## Assistant \(research, completed\)/);
    assert.match(md.text, /- notes\.md \(\d+ bytes\)/);
    assert.equal(js.name, 'hello-there.json');
    const doc = JSON.parse(js.text);
    assert.equal(doc.format, 'private-assistant.conversation.v1');
    assert.deepEqual(doc.messages.map((m) => m.role), ['user', 'assistant', 'user', 'assistant']);
    assert.equal(doc.messages[0].versions, 4);
    assert.equal(doc.messages[1].kind, 'research');
    assert.equal(doc.messages[3].artifacts[0].filename, 'notes.md');
    // And the engine saved them.
    for (const [name, text] of [[md.name, md.text], [js.name, js.text]]) {
      const saved = await waitFor(() => existsSync(join(downloads, name)) && readFileSync(join(downloads, name), 'utf8'), null, 15000, `${name} saved`);
      assert.equal(saved, text, `${name} on disk (${readdirSync(downloads)})`);
    }
    await p.fit();
  });

  await step('search: matched words marked as text; a hit opens the branch that holds it', async () => {
    await openPanel(p);
    await p.fill('#conv-search', 'hello there');
    await p.waitFor(() => document.querySelectorAll('#hits button.hit').length >= 2);
    const hits = await p.eval(() => [...document.querySelectorAll('#hits button.hit')].map((b) => ({ head: b.querySelector('.hit-head').textContent,
      snippet: b.querySelector('.hit-snippet').textContent, marks: [...b.querySelectorAll('mark')].map((m) => m.textContent.toLowerCase()) })));
    const mine = hits.findIndex((h) => /· you$/.test(h.head) && h.snippet === 'hello there');
    assert.ok(mine >= 0, JSON.stringify(hits));
    assert.deepEqual(hits[mine].marks, ['hello', 'there']);
    assert.ok(hits.some((h) => /· answer$/.test(h.head) && /You said: hello there/.test(h.snippet)), 'what was answered is found too');
    await shot('search');
    await p.click(`#hits li:nth-child(${mine + 2}) button.hit`);
    await p.waitFor(() => !!document.querySelector('.msg.user.flash'));
    await showing(p, ['hello there', 'You said: hello there']);
    assert.equal(await pos(p), '1/4', 'the earlier version, found');
    await openPanel(p);
    await p.fill('#conv-search', 'zzqq');
    await p.waitFor(() => /No message contains/.test(document.getElementById('hits').textContent));
    await p.fill('#conv-search', '');
  });

  await step('SVG icons; deleting asks in an in-app dialog, Escape cancels', async () => {
    await openPanel(p);
    assert.equal(await p.eval(() => document.querySelectorAll('.conv-item .conv-act.delete svg').length), 2);
    assert.doesNotMatch(await p.eval(() => document.getElementById('conversations').textContent), /🗑|✎/);
    await p.hover(`.conv-item[data-id="${convB}"]`);
    await p.click(`.conv-item[data-id="${convB}"] .conv-act.delete`);
    await p.waitFor(() => !!document.querySelector('dialog[open]'));
    assert.match(await p.eval(() => document.querySelector('dialog[open]').textContent), /tell me something #long/);
    await shot('confirm');
    await p.press('Escape');
    await p.waitFor(() => !document.querySelector('dialog'));
    assert.equal(await p.eval((id) => !!document.querySelector(`.conv-item[data-id="${id}"]`), convB), true, 'cancelled: nothing deleted');
  });

  await step('the counter shows before the limit and stops a message over it', async () => {
    if (phone) await p.press('Escape'); // the ☰ panel closes
    const from = (await requests()).length;
    // Long text is pasted (typing 16,000 keys takes half a minute): 132 typed, copied and
    // pasted ten times (1,320), that copied and pasted ten times (13,200), three more (17,160).
    await p.fill('#draft', 'x'.repeat(132));
    for (let i = 0; i < 2; i++) {
      await p.press('Control+a');
      await p.press('Control+c');
      await p.press('Control+v', 10);
    }
    await p.waitFor(() => document.getElementById('counter').checkVisibility() && document.getElementById('counter').textContent === '13,200 / 16,384');
    await p.press('Control+v', 3);
    await p.waitFor(() => document.getElementById('counter').textContent === '17,160 / 16,384: 776 too many');
    await shot('counter');
    await p.press('Enter');
    await p.waitFor(() => /too long/.test(document.getElementById('composer-status').textContent));
    assert.deepEqual((await requests()).slice(from).filter((r) => r.method === 'POST'), [], 'not sent');
    await p.fill('#draft', '');
    await p.waitFor(() => !document.getElementById('counter').checkVisibility());
    assert.equal(await p.eval(() => document.getElementById('composer-status').textContent), '', 'the refusal goes once the message fits');
  });

  await step('shortcuts: ? lists them, Ctrl+Shift+C copies the last answer, Ctrl+K searches', async () => {
    await p.click('#messages');
    await p.press('?');
    await p.waitFor(() => !!document.querySelector('dialog.help[open]'));
    const help = await p.eval(() => document.querySelector('dialog.help').textContent);
    for (const k of ['Ctrl+Shift+O', 'Ctrl+K', 'Esc', 'Ctrl+Shift+C']) assert.ok(help.includes(k), k);
    await shot('help');
    await p.press('Escape');
    await p.waitFor(() => !document.querySelector('dialog'));
    await p.press('Control+Shift+C');
    await p.waitFor(() => /Copied the last answer/.test(document.getElementById('composer-status').textContent));
    // What was copied, pasted back as a person would.
    await p.click('#draft');
    await p.press('Control+v');
    assert.equal(await p.waitFor(() => document.getElementById('draft').value), 'You said: hello there', 'the answer shown last (the branch search opened)');
    await p.fill('#draft', '');
    await p.press('Control+k');
    await p.waitFor(() => document.activeElement?.id === 'conv-search' && document.getElementById('conv-search').checkVisibility());
    if (phone) await p.press('Escape');
  });

  await step('a deep link survives signing in', async () => {
    await p.click('#signout');
    await p.waitFor(() => !!document.querySelector('#auth:not([hidden])'));
    await p.goto(`${BASE}/c/${convB}`);
    await p.waitFor(() => !!document.querySelector('#auth:not([hidden])'));
    await signIn(p, email);
    await showing(p, B_SHOWN);
    assert.equal(await path(p), `/c/${convB}`);
  });

  await step(`a signed-in load: nothing refused or reported; ${phone ? '☰ shown, ' : ''}the placeholder fits`, async () => {
    const from = (await requests()).length;
    await p.reload();
    await showing(p, B_SHOWN);
    assert.equal(await p.eval(() => document.getElementById('menu').checkVisibility()), phone, '☰ on a phone only');
    const fit = await p.eval(placeholderFit);
    assert.ok(fit.need <= fit.have, `placeholder ${fit.need} px in ${fit.have} px`);
    await shot('composer');
    assert.deepEqual(await refused(from), [], 'a signed-in load has no API request refused');
    assert.equal(await p.eval(() => document.documentElement.scrollWidth <= innerWidth), true, 'no horizontal scroll');
    assert.deepEqual(await p.errors(), []);
  });
}
