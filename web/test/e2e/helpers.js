import { chromium } from 'playwright-core';

export const BASE = process.env.PA_BASE_URL;
if (!BASE) throw new Error('PA_BASE_URL is not set (run through `make test`)');

export async function launch() {
  return chromium.launch({
    executablePath: process.env.PA_CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run'],
  });
}

let n = 0;
/** A fresh user, signed up through the UI. Returns the page. */
export async function signUp(browser, opts = {}, setup = null) {
  const ctx = await browser.newContext(opts);
  const page = await ctx.newPage();
  page.errors = [];
  page.on('pageerror', (e) => page.errors.push(e.message));
  if (setup) await setup(page);
  await page.goto(BASE);
  await page.waitForSelector('#auth:not([hidden])');
  await page.click('#auth-toggle');
  const email = `u${Date.now()}${n++}@example.com`;
  await page.fill('#email', email);
  await page.fill('#password', 'password-' + email);
  await page.fill('#name', 'Tester');
  await page.click('#auth-submit');
  await page.waitForSelector('#app:not([hidden])');
  page.email = email;
  if (await admit(page)) {
    // The server may remember the account as it was for a few seconds (its JWT cache):
    // reload until the app is let in.
    for (let i = 0; ; i++) {
      await page.reload();
      await page.waitForSelector('#app:not([hidden])');
      const state = await page.waitForFunction(() => {
        if (/not been admitted/.test(document.getElementById('chat-error').textContent)) return 'out';
        return document.querySelector('#messages .empty, #messages .msg') ? 'in' : false;
      }, null, { timeout: 15000 }).then((h) => h.jsonValue());
      if (state === 'in') break;
      if (i >= 15) throw new Error('the admitted account is still refused');
      await page.waitForTimeout(1000);
    }
  }
  return page;
}

// The product is closed by default: an account from public sign-up is no member. The dev
// stack's administrator (PA_ADMIN_EMAIL / PA_ADMIN_PASS, passed by scripts/dev) admits it.
let adminJWT = null;
async function adminToken() {
  if (adminJWT && Date.now() - adminJWT.at < 5 * 60 * 1000) return adminJWT.jwt;
  const cfgText = await (await fetch(BASE + '/config.js')).text();
  const cfg = JSON.parse(cfgText.slice(cfgText.indexOf('{'), cfgText.lastIndexOf('}') + 1));
  const h = { 'Content-Type': 'application/json', 'X-Appwrite-Project': cfg.project };
  const s = await fetch(cfg.endpoint + '/account/sessions/email', { method: 'POST', headers: h,
    body: JSON.stringify({ email: process.env.PA_ADMIN_EMAIL, password: process.env.PA_ADMIN_PASS }) });
  if (!s.ok) throw new Error(`admin sign-in: ${s.status} ${await s.text()}`);
  const cookie = s.headers.getSetCookie().map((c) => c.split(';')[0]).join('; ');
  const j = await fetch(cfg.endpoint + '/account/jwts', { method: 'POST', headers: { ...h, Cookie: cookie } });
  if (!j.ok) throw new Error(`admin JWT: ${j.status} ${await j.text()}`);
  adminJWT = { jwt: (await j.json()).jwt, at: Date.now() };
  return adminJWT.jwt;
}

export async function admit(page) {
  if (!process.env.PA_ADMIN_EMAIL) return false;
  const id = await page.evaluate(async () => {
    const acc = new window.Appwrite.Account(new window.Appwrite.Client().setEndpoint(window.PA_CONFIG.endpoint).setProject(window.PA_CONFIG.project));
    return (await acc.get()).$id;
  });
  const res = await fetch(`${BASE}/api/members/${encodeURIComponent(id)}`, { method: 'PUT',
    headers: { Authorization: 'Bearer ' + await adminToken(), 'Content-Type': 'application/json' }, body: JSON.stringify({ member: true }) });
  if (!res.ok) throw new Error(`admit ${id}: ${res.status} ${await res.text()}`);
  return true;
}

export async function send(page, text, role = 'chat') {
  await page.selectOption('#role', role);
  await page.fill('#draft', text);
  await page.click('#send');
}

/** Waits for the newest run card to reach a status. */
export async function waitRun(page, status, timeout = 30000) {
  await page.waitForFunction((st) => {
    const cards = document.querySelectorAll('.run');
    return cards.length && cards[cards.length - 1].querySelector('.status')?.classList.contains(st);
  }, status, { timeout });
}

export async function lastAnswer(page) {
  return page.evaluate(() => {
    const a = [...document.querySelectorAll('.msg.assistant:not([hidden]) .body')];
    return a.length ? a[a.length - 1].innerText : '';
  });
}

/** The newest run card's text (visible or not). */
export async function lastCard(page) {
  return page.evaluate(() => [...document.querySelectorAll('.run')].pop()?.textContent || '');
}

/** Reloads and waits until the conversation is shown again. */
export async function reload(page) {
  await page.reload();
  await page.waitForSelector('#app:not([hidden])');
  await page.waitForSelector('.msg.user');
}

/** A screenshot into build/screenshots (gitignored), named by the test. */
export async function shot(page, name) {
  const { mkdirSync } = await import('node:fs');
  const dir = new URL('../../../build/screenshots/', import.meta.url).pathname;
  mkdirSync(dir, { recursive: true });
  await page.screenshot({ path: dir + name + '.png' });
  return dir + name + '.png';
}
