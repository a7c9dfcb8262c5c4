// Issue 12: the web renews its Appwrite JWT shortly before it expires (not per call, not
// after a refusal), with a 6-second JWT from the emulator so expiry comes within the test.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { launch, signUp, send, waitRun, lastAnswer } from './helpers.js';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

test('a short-lived JWT is renewed before it expires: no request is refused, few tokens are made', async () => {
  const made = [];
  const refused = [];
  const page = await signUp(browser, {}, async (p) => {
    await p.route('**/config.js', async (route) => {
      const res = await route.fetch();
      const text = (await res.text()).replace('window.PA_CONFIG = {', 'window.PA_CONFIG = {"jwtSeconds":6,');
      await route.fulfill({ response: res, body: text });
    });
    p.on('response', async (r) => {
      if (!/\/account\/jwts?$/.test(new URL(r.url()).pathname)) return;
      const c = JSON.parse(Buffer.from((await r.json()).jwt.split('.')[1], 'base64url').toString());
      made.push(c.exp - c.iat);
    });
    p.on('response', (r) => { if (new URL(r.url()).pathname.startsWith('/api/') && r.status() === 401) refused.push(r.url()); });
  });
  const t0 = Date.now();
  await send(page, 'first, with a fresh token');
  await waitRun(page, 'completed');
  // Outlive the token (the tab's feed and System panel keep calling the API meanwhile).
  await page.waitForTimeout(8000);
  await send(page, 'second, after the first token expired');
  await page.waitForFunction(() => document.querySelectorAll('.msg.assistant:not([hidden])').length === 2, null, { timeout: 20000 });
  await page.waitForFunction(() => /expired$/.test([...document.querySelectorAll('.msg.assistant:not([hidden]) .body')].pop().innerText.trim()), null, { timeout: 20000 });
  assert.match(await lastAnswer(page), /You said: second, after the first token expired/);
  const secs = (Date.now() - t0) / 1000;
  console.log(`session: ${made.length} JWTs in ${secs.toFixed(1)} s of 6-second JWTs; ${refused.length} API requests refused`);
  assert.deepEqual(refused, [], 'no API request was refused for an expired token');
  assert.ok(made.every((life) => life === 6), `6-second JWTs: ${made}`);
  assert.ok(made.length >= 2, `renewed after it expired (${made.length})`);
  assert.ok(made.length <= Math.ceil(secs / 4) + 1, `${made.length} JWTs in ${secs} s: made only when needed`);
  assert.deepEqual(page.errors, []);
});
