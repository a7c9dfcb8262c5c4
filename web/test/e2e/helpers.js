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
/** A fresh user, signed up through the UI by redeeming an invitation the dev administrator
 * issued (the product is closed: public sign-up makes no member). Returns the page. */
export async function signUp(browser, opts = {}, setup = null) {
  const ctx = await browser.newContext(opts);
  const page = await ctx.newPage();
  page.errors = [];
  page.on('pageerror', (e) => page.errors.push(e.message));
  if (setup) await setup(page);
  const url = new URL(BASE);
  url.hash = 'invite=' + await invite();
  await page.goto(url.href);
  await page.waitForSelector('#auth:not([hidden]) #name-row:not([hidden])');
  const email = `u${Date.now()}${n++}@example.com`;
  await page.fill('#email', email);
  await page.fill('#password', 'password-' + email);
  await page.fill('#name', 'Tester');
  await page.click('#auth-submit');
  await page.waitForSelector('#app:not([hidden])');
  await page.waitForSelector('#messages .empty, #messages .msg');
  page.email = email;
  return page;
}

/** A new invitation token from the dev administrator. */
export async function invite(expiresInHours = 1) {
  const res = await fetch(`${BASE}/api/invitations`, { method: 'POST',
    headers: { Authorization: 'Bearer ' + await adminToken(), 'Content-Type': 'application/json' }, body: JSON.stringify({ expiresInHours }) });
  if (!res.ok) throw new Error(`invite: ${res.status} ${await res.text()}`);
  return (await res.json()).token;
}

/** appwriteConfig: the endpoint and project the page uses. */
export async function appwriteConfig() {
  const cfgText = await (await fetch(BASE + '/config.js')).text();
  return JSON.parse(cfgText.slice(cfgText.indexOf('{'), cfgText.lastIndexOf('}') + 1));
}

/** An account made through Appwrite's own public sign-up (not admitted). */
export async function plainAccount() {
  const cfg = await appwriteConfig();
  const email = `p${Date.now()}${n++}@example.com`;
  const res = await fetch(cfg.endpoint + '/account', { method: 'POST', headers: { 'Content-Type': 'application/json', 'X-Appwrite-Project': cfg.project },
    body: JSON.stringify({ userId: 'unique()', email, password: 'password-' + email, name: 'Outsider' }) });
  if (!res.ok) throw new Error(`plain sign-up: ${res.status} ${await res.text()}`);
  return { email, password: 'password-' + email };
}

// The product is closed by default: an account from public sign-up is no member. The dev
// stack's administrator (PA_ADMIN_EMAIL / PA_ADMIN_PASS, passed by scripts/dev) admits it.
let adminJWT = null;
async function adminToken() {
  if (adminJWT && Date.now() - adminJWT.at < 5 * 60 * 1000) return adminJWT.jwt;
  const cfg = await appwriteConfig();
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

/** adminCall: an API call as the dev administrator; the parsed answer (throws unless 2xx). */
export async function adminCall(method, path, body) {
  const res = await fetch(BASE + path, { method, headers: { Authorization: 'Bearer ' + await adminToken(), 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body) });
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
  return res.json();
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
  try {
    await page.waitForFunction((st) => {
      const cards = document.querySelectorAll('.run');
      return cards.length && cards[cards.length - 1].querySelector('.status')?.classList.contains(st);
    }, status, { timeout });
  } catch (e) {
    // Say what the page showed instead: a timeout alone tells nothing.
    const seen = await page.evaluate(() => ({
      cards: [...document.querySelectorAll('.run')].map((c) => `${c.dataset.run || '?'}: ${c.querySelector('.status')?.className} ${c.querySelector('.status')?.textContent}`),
      messages: [...document.querySelectorAll('.msg')].map((m) => m.textContent.slice(0, 80)),
      composer: document.getElementById('composer-status')?.textContent,
      error: document.getElementById('chat-error')?.textContent,
      draft: document.getElementById('draft')?.value,
      send: document.getElementById('send')?.textContent,
    })).catch((err) => ({ evaluate: String(err) }));
    e.message += `\nwaiting for the newest run to be ${status}; the page showed ${JSON.stringify(seen)}; page errors ${JSON.stringify(page.errors || [])}`;
    throw e;
  }
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
