// Closed by default: accounts come only from invitations, a signed-in non-member sees the
// "not admitted yet" screen, and the role picker offers only what GET /api/roles allows.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { launch, signUp, invite, plainAccount, admit, BASE } from './helpers.js';
import { fakeApi } from './fake.js';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

let n = 0;
const email = () => `i${Date.now()}${n++}@example.com`;

async function fresh() {
  const ctx = await browser.newContext();
  const page = await ctx.newPage();
  page.errors = [];
  page.on('pageerror', (e) => page.errors.push(e.message));
  page.urls = [];
  page.on('request', (r) => page.urls.push({ url: r.url(), referer: r.headers().referer || '' }));
  return page;
}

function linkFor(token) {
  const u = new URL(BASE);
  u.hash = 'invite=' + token;
  return u.href;
}

async function fillSignUp(page, addr) {
  await page.fill('#email', addr);
  await page.fill('#password', 'password-' + addr);
  await page.fill('#name', 'Invitee');
  await page.click('#auth-submit');
}

test('an invitation link: the token leaves the address bar at once, never reaches a server in a URL, and makes a member', async () => {
  const token = await invite();
  const page = await fresh();
  await page.goto(linkFor(token));
  await page.waitForSelector('#auth:not([hidden]) #name-row:not([hidden])');
  assert.ok(!page.url().includes(token), `token still in the address bar: ${page.url()}`);
  assert.ok(!page.url().includes('#'), page.url());
  assert.equal(await page.evaluate(() => location.hash), '');
  assert.equal(await page.isHidden('#invite-row'), true, 'the link already carries the code');
  assert.match(await page.textContent('#auth-title'), /Create your account/);
  const addr = email();
  await fillSignUp(page, addr);
  await page.waitForSelector('#app:not([hidden])');
  await page.waitForSelector('#messages .empty, #messages .msg');
  assert.match(await page.textContent('#who'), new RegExp(addr.replace(/[.]/g, '\\.')));
  for (const r of page.urls) {
    assert.ok(!r.url.includes(token), `token in a request URL: ${r.url}`);
    assert.ok(!r.referer.includes(token), `token in a Referer: ${r.referer}`);
  }
  assert.deepEqual(page.errors, []);

  // The same link again: already used, said plainly, and the sign-in form is offered.
  const again = await fresh();
  await again.goto(linkFor(token));
  await again.waitForSelector('#name-row:not([hidden])');
  await fillSignUp(again, email());
  await again.waitForFunction(() => document.getElementById('auth-error').textContent.length > 0);
  assert.match(await again.textContent('#auth-error'), /already been used/);
  assert.doesNotMatch(await again.textContent('#auth-error'), /invitation_used|409/);
  assert.match(await again.textContent('#auth-title'), /Sign in/);
  await again.context().close();
  await page.context().close();
});

test('without an invitation there is no sign-up form; a pasted code or link works and errors are plain', async () => {
  const page = await fresh();
  await page.goto(BASE);
  await page.waitForSelector('#auth:not([hidden])');
  assert.equal(await page.isHidden('#name-row'), true);
  assert.equal(await page.isHidden('#invite-row'), true);
  assert.match(await page.textContent('#auth-title'), /Sign in/);
  assert.doesNotMatch(await page.textContent('#auth'), /Create an account/);
  await page.click('#auth-toggle');
  await page.waitForSelector('#invite-row:not([hidden])');

  // A made-up code.
  await page.fill('#invite', 'A'.repeat(43));
  await fillSignUp(page, email());
  await page.waitForFunction(() => document.getElementById('auth-error').textContent.length > 0);
  assert.match(await page.textContent('#auth-error'), /not valid/);

  // An existing account's email.
  const taken = await plainAccount();
  await page.fill('#invite', await invite());
  await page.fill('#email', taken.email);
  await page.click('#auth-submit');
  await page.waitForFunction(() => /already exists/.test(document.getElementById('auth-error').textContent));
  assert.match(await page.textContent('#auth-title'), /Sign in/);

  // The whole link pasted into the field.
  await page.click('#auth-toggle');
  const token = await invite();
  await page.fill('#invite', linkFor(token));
  await fillSignUp(page, email());
  await page.waitForSelector('#app:not([hidden])');
  for (const r of page.urls) assert.ok(!r.url.includes(token), `token in a request URL: ${r.url}`);
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

test('an expired invitation is explained', async () => {
  const page = await fresh();
  await page.route('**/api/invitations/redeem', (route) => route.fulfill({ status: 403, contentType: 'application/json',
    body: JSON.stringify({ error: { code: 'invitation_expired', message: 'this invitation has expired; ask for a new one' } }) }));
  await page.goto(linkFor('B'.repeat(43)));
  await page.waitForSelector('#name-row:not([hidden])');
  await fillSignUp(page, email());
  await page.waitForFunction(() => document.getElementById('auth-error').textContent.length > 0);
  assert.match(await page.textContent('#auth-error'), /has expired\. Ask the person who invited you for a new one/);
  assert.match(await page.textContent('#auth-title'), /Create your account/, 'still the sign-up form');
  await page.context().close();
});

test('an account from public sign-up sees "not admitted yet" until the administrator admits it', async () => {
  const acct = await plainAccount();
  const page = await fresh();
  await page.goto(BASE);
  await page.waitForSelector('#auth:not([hidden])');
  await page.fill('#email', acct.email);
  await page.fill('#password', acct.password);
  await page.click('#auth-submit');
  await page.waitForSelector('#gate:not([hidden])');
  assert.equal(await page.isHidden('#app'), true);
  const text = await page.textContent('#gate-text');
  assert.match(text, /has not been admitted/);
  assert.match(text, /Ask the person who runs this assistant/);
  assert.ok(text.includes(acct.email));
  assert.equal(await page.isVisible('#signout'), true);
  // Nothing but /api/me was asked of the API.
  const api = page.urls.filter((r) => new URL(r.url).pathname.startsWith('/api/')).map((r) => new URL(r.url).pathname);
  assert.deepEqual([...new Set(api)], ['/api/me']);

  await admit(page);
  // The server may remember the account as it was for a few seconds (its JWT cache).
  for (let i = 0; ; i++) {
    await page.click('#gate-retry');
    const state = await page.waitForFunction(() => (!document.getElementById('app').hidden ? 'in'
      : document.getElementById('gate-retry').disabled ? false : 'out'), null, { timeout: 15000 }).then((h) => h.jsonValue());
    if (state === 'in') break;
    if (i >= 15) throw new Error('the admitted account is still refused');
    await page.waitForTimeout(1000);
  }
  await page.waitForSelector('#messages .empty, #messages .msg');
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

test('the role picker offers only the roles GET /api/roles allows', async () => {
  const page = await signUp(browser);
  const allowed = await page.evaluate(async () => {
    const acc = new window.Appwrite.Account(new window.Appwrite.Client().setEndpoint(window.PA_CONFIG.endpoint).setProject(window.PA_CONFIG.project));
    const { jwt } = await acc.createJWT();
    const r = await fetch('/api/roles', { headers: { Authorization: 'Bearer ' + jwt } });
    return (await r.json()).roles.map((x) => x.name).sort();
  });
  assert.ok(allowed.length > 0);
  const offered = await page.$$eval('#role option', (os) => os.map((o) => o.value).sort());
  assert.deepEqual(offered, allowed);
  await page.context().close();

  // An account allowed only chat is offered only chat.
  const only = await signUp(browser, {}, (p) => fakeApi(p, { roles: [{ name: 'chat', tools: [] }] }));
  assert.deepEqual(await only.$$eval('#role option', (os) => os.map((o) => o.value)), ['chat']);
  assert.match(await only.textContent('#role'), /Chat/);
  await only.context().close();
});
