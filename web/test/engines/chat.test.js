// Issue 34 item 5: the web chat in Firefox ESR and WebKit (PA_ENGINE), at 1280×800 and
// 390×844: sign-up by invitation and sign-in, a short-lived JWT renewed before it expires,
// live streaming, an upload the model reads, an artifact download, the web app manifest, the
// service worker's shell (and a load while offline), the conversation list, then in the same
// engine session items 1–4 (habits.js); then the web on another origin than Appwrite and the
// API (same-site) with third-party cookies blocked.
// Run by scripts/dev TestWebChatInFirefoxAndWebKit, which serves the page with 6-second JWTs
// and logs the API requests it passes on (/_engines/requests).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync, writeFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { BASE } from '../e2e/helpers.js';
import { open, scratch, rmSync, mkdirSync, waitFor } from './driver.js';
import { manifestInPage, checkManifest } from './manifest.js';
import { habits } from './habits.js';
import { ENGINE, SIZES, SHOTS, signUp, signIn, sendAndWatch, shown, requests, catchDownloads } from './steps.js';

const CROSS = process.env.PA_CROSS_URL;
const CROSS_API = process.env.PA_CROSS_API_URL;
// A research job on the Hermes double: seconds, more on a loaded 2-core machine.
const RESEARCH = 120000;

async function upload(p, dir) {
  const file = join(dir, 'tides.txt');
  writeFileSync(file, 'High tide at 14:07, low at 20:19.\n');
  await p.setFiles('#file-input', [file]);
  await p.waitFor(() => {
    const c = [...document.querySelectorAll('#attachments .chip')];
    return c.length === 1 && c[0].dataset.state === 'ready' && c[0].querySelector('.name').textContent;
  }, null, 15000);
  const { answer } = await sendAndWatch(p, 'When is high tide? See the file.');
  assert.match(answer, /High tide at 14:07, low at 20:19/, 'the model was given the uploaded file');
  assert.deepEqual(await p.eval(() => [...document.querySelectorAll('.msg.user .attachments .name')].map((x) => x.textContent)), ['tides.txt']);
}

/** A research job's artifact downloaded: the bytes the app handed the engine, and the file it saved. */
async function download(p, downloads) {
  await sendAndWatch(p, '#research a topic', { role: 'research', timeout: RESEARCH });
  await p.waitFor(() => !!document.querySelector('.run .artifacts button.file'), null, 15000);
  await catchDownloads(p);
  await p.click('.run .artifacts button.file');
  const [got] = await p.waitFor(() => window.__downloads.length && window.__downloads, null, 60000);
  const notes = '# Notes\n\n- first source\n- second source\n';
  assert.deepEqual(got, { name: 'notes.md', text: notes });
  if (downloads) {
    const saved = await waitFor(() => existsSync(join(downloads, 'notes.md')) && readFileSync(join(downloads, 'notes.md'), 'utf8'), null, 15000, 'notes.md saved');
    assert.equal(saved, notes, `the engine saved the file (${readdirSync(downloads)})`);
    await p.fit();
  }
}

/** The service worker controls the page after a reload and holds every shell file. */
async function serviceWorker(p) {
  const shell = JSON.parse(/const SHELL = (\[[^\]]*\])/.exec(readFileSync(new URL('../../sw.js', import.meta.url), 'utf8'))[1].replace(/'/g, '"'));
  await p.waitFor(async () => !!(await navigator.serviceWorker.getRegistration())?.active, null, 20000);
  await p.reload();
  await shown(p);
  const sw = await p.waitFor(async () => {
    if (!navigator.serviceWorker.controller) return false;
    const names = await caches.keys();
    const c = await caches.open(names.find((k) => k.startsWith('pa-shell-')));
    return { names, cached: (await c.keys()).map((r) => new URL(r.url).pathname) };
  }, null, 15000);
  assert.deepEqual(sw.cached.filter((x) => !shell.includes(x)), [], 'only shell files are cached');
  assert.deepEqual(shell.filter((x) => !sw.cached.includes(x)), [], 'every shell file is cached');

  // Offline, a load still gets the page from the shell (styled, its modules loaded, its
  // config.js: no error thrown), and back online the app is signed in again. Firefox
  // only for now: after the test front drops WebKit's connections (its way of being offline),
  // WebKitGTK's network process sometimes sends nothing more to that origin (no request
  // reaches the front for minutes), which a test cannot tell from an app fault. Tried: a
  // reset (RST) instead of a closed connection fails the same way (1 run in 2: the second
  // session, after going back online, loads the page from the shell with no request reaching
  // the front, config.js missing).
  if (p.engine !== 'firefox') return;
  const seenErrors = (await p.errors()).length;
  await offline(true);
  try {
    await p.goto(BASE + '/');
    await p.waitFor(() => document.querySelector('header.top h1')?.textContent === 'Private Assistant'
      && getComputedStyle(document.body).display === 'flex' && !!navigator.serviceWorker.controller, null, 15000);
    const thrown = (await p.errors()).slice(seenErrors).filter((m) => !/NetworkError|Failed to fetch|network/i.test(m));
    assert.deepEqual(thrown, [], 'an offline load throws nothing but network failures');
  } finally {
    await offline(false);
  }
  await p.goto(BASE + '/');
  await shown(p);
  (await p.errors()).splice(seenErrors);
}

async function offline(on) {
  const res = await fetch(`${BASE}/_engines/offline?on=${on ? 1 : 0}`, { method: 'POST' });
  assert.equal(res.status, 204);
}

for (const size of SIZES) {
  const label = `${size.width}x${size.height}`;
  // One engine session per size: these steps, then issue 34's habits (habits.js).
  test(`${ENGINE} ${label}`, async (t) => {
    const dir = scratch('pa-engines-');
    const downloads = join(dir, 'downloads');
    mkdirSync(downloads);
    const p = await open(ENGINE, { ...size, downloads });
    try {
      await t.test('invitation sign-up, live streaming, JWT renewal, upload, download, manifest, service worker (offline too in Firefox), sign out and in, the conversation list (☰ on a phone)', async () => {
        console.log(`${ENGINE} ${p.version} at ${label}`);
        assert.deepEqual(await p.eval(() => [innerWidth, innerHeight]), [size.width, size.height]);
        const seen0 = (await requests()).length;
        const t0 = Date.now();
        const email = await signUp(p, BASE);
        // An installable app: the manifest, its icons (loaded at install sizes) and the shell.
        checkManifest(await p.eval(manifestInPage));

        // A 96-token answer at 20 ms a token: seen growing on screen, not only when done.
        const first = await sendAndWatch(p, 'tell me a #story');
        assert.match(first.answer, /^(once upon a time there was a careful agent\s*){12}$/);
        const partial = first.lengths.filter((l) => l > 0 && l < first.answer.length);
        assert.ok(partial.length >= 3, `the answer streamed in (lengths seen: ${first.lengths})`);
        // Nothing overflows sideways (the phone size above all).
        assert.equal(await p.eval(() => document.documentElement.scrollWidth <= innerWidth), true, 'no horizontal scroll');
        mkdirSync(SHOTS, { recursive: true });
        await p.screenshot(join(SHOTS, `engines-${ENGINE}-${label}.png`));

        await upload(p, dir);
        await download(p, downloads);
        await p.screenshot(join(SHOTS, `engines-${ENGINE}-${label}-research.png`));

        // The 6-second JWT has expired by now (or is made to): the next call renews it first.
        const left = 7000 - (Date.now() - t0);
        if (left > 0) await new Promise((r) => setTimeout(r, left));
        const last = await sendAndWatch(p, 'after the first token expired');
        assert.equal(last.answer, 'You said: after the first token expired');
        const seen = (await requests()).slice(seen0);
        const refused = seen.filter((r) => /^\/(api|stream)\//.test(r.path) && r.status === 401);
        const jwts = seen.filter((r) => r.method === 'POST' && r.path === '/v1/account/jwts' && r.status === 201);
        assert.deepEqual(refused, [], 'no API request was refused for an expired token');
        const secs = (Date.now() - t0) / 1000;
        assert.ok(jwts.length >= 2 && jwts.length <= Math.ceil(secs / 4) + 2, `${jwts.length} JWTs in ${secs.toFixed(1)} s: renewed, and only when needed`);
        assert.ok(seen.some((r) => /^\/stream\/artifacts\/[^/]+\/download$/.test(r.path) && r.status === 200), 'bytes from the stream service');

        await serviceWorker(p);

        // Sign out and in through the form: the conversation is still there.
        await p.click('#signout');
        await p.waitFor(() => !!document.querySelector('#auth:not([hidden])'));
        await p.screenshot(join(SHOTS, `engines-${ENGINE}-${label}-signin.png`));
        await signIn(p, email);
        await p.waitFor(() => /after the first token expired/.test(document.getElementById('messages').textContent), null, 15000);

        // A new conversation and back, through the ☰ panel on a phone (the list is beside
        // the chat on a desktop, and the ☰ button hidden).
        const phone = size.width < 720;
        assert.equal(await p.eval(() => !document.getElementById('menu').hidden && getComputedStyle(document.getElementById('menu')).display !== 'none'), phone, 'the ☰ button shows on a phone only');
        const panel = async () => {
          if (!phone) return;
          await p.click('#menu');
          await p.waitFor(() => getComputedStyle(document.getElementById('sidebar')).display !== 'none');
        };
        const closed = () => getComputedStyle(document.getElementById('sidebar')).display === 'none' || innerWidth >= 720;
        await panel();
        await p.click('#new-conv');
        await p.waitFor(closed);
        await p.waitFor(() => !!document.querySelector('#messages .empty') && !document.querySelector('#messages .msg'));
        await panel();
        await p.click('#conversations button.conv');
        await p.waitFor(closed);
        await p.waitFor(() => /after the first token expired/.test(document.getElementById('messages').textContent), null, 15000);
        assert.deepEqual(await p.errors(), []);
      });
      await habits(t, p, { size, downloads });
    } finally {
      await p.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
}

test(`${ENGINE} cross-origin, third-party cookies blocked: sign-up, streaming, upload and download with the web on another origin than Appwrite and the API`, { skip: !CROSS && 'PA_CROSS_URL is not set' }, async () => {
  const dir = scratch('pa-engines-');
  const p = await open(ENGINE, SIZES[0]);
  try {
    await signUp(p, CROSS);
    const cfg = await p.eval(() => window.PA_CONFIG);
    assert.notEqual(new URL(cfg.endpoint).origin, new URL(CROSS).origin, 'Appwrite is on another origin');
    assert.notEqual(new URL(cfg.api).origin, new URL(CROSS).origin, 'the API is on another origin');
    const { answer } = await sendAndWatch(p, 'hello across origins');
    assert.equal(answer, 'You said: hello across origins');
    // The API origin is same-site: its session cookie is first-party, so the session holds
    // without the SDK's localStorage fallback (what a cross-site API domain would need).
    await p.eval(() => localStorage.removeItem('cookieFallback'));
    await p.reload();
    await shown(p);
    await upload(p, dir);
    await download(p, undefined);
    // Every kind of call crossed origins and was answered: Appwrite (account, JWTs,
    // storage), the API, and the stream service's live events (Last-Event-ID preflighted)
    // and download; no preflight refused.
    const seen = await requests(CROSS_API);
    const answered = (re, method = 'GET') => seen.some((r) => r.method === method && re.test(r.path) && r.status < 300);
    for (const [re, method] of [[/^\/v1\/account\/jwts$/, 'POST'], [/^\/v1\/storage\/buckets\/uploads\/files$/, 'POST'], [/^\/api\/conversations$/, 'POST'],
      [/^\/stream\/runs\/[^/]+\/events$/], [/^\/stream\/artifacts\/[^/]+\/download$/]]) {
      assert.ok(answered(re, method), `${method || 'GET'} ${re} crossed origins: ${JSON.stringify(seen.map((r) => `${r.method} ${r.path} ${r.status}`))}`);
    }
    assert.deepEqual(seen.filter((r) => r.method === 'OPTIONS' && r.status >= 300), [], 'no preflight refused');
    assert.deepEqual(await p.errors(), []);
  } finally {
    await p.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
