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
  return page;
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
