// Issue 34 item 5: an installable web app: the page links a manifest (name, start URL in
// scope, standalone display, icons that load at install sizes), the service worker's shell
// holds the manifest and its icons, and — in Chromium, the one engine that says why a page
// is or is not installable (DevTools Page.getInstallabilityErrors) — no installability error,
// while the same page without its manifest link has some (the check can fail).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { BASE } from '../e2e/helpers.js';

const ENGINE = process.env.PA_ENGINE;
const shell = JSON.parse(/const SHELL = (\[[^\]]*\])/.exec(readFileSync(new URL('../../sw.js', import.meta.url), 'utf8'))[1].replace(/'/g, '"'));

/** What the page's manifest says and how its icons load, read in the page itself. */
function manifestInPage() {
  return (async () => {
    const link = document.querySelector('link[rel=manifest]');
    if (!link) return { link: null };
    const res = await fetch(link.href);
    const m = await res.json();
    const icons = await Promise.all((m.icons || []).map((i) => new Promise((resolve) => {
      const img = new Image();
      img.onload = () => resolve({ ...i, width: img.naturalWidth, height: img.naturalHeight });
      img.onerror = () => resolve({ ...i, width: 0, height: 0 });
      img.src = new URL(i.src, link.href).href;
    })));
    return { link: new URL(link.href).pathname, status: res.status, manifest: m, icons, theme: document.querySelector('meta[name=theme-color]')?.content };
  })();
}

function checkManifest(got) {
  assert.equal(got.link, '/manifest.json');
  assert.equal(got.status, 200);
  const m = got.manifest;
  assert.equal(m.name, 'Private Assistant');
  assert.ok(m.short_name && m.short_name.length <= 12, `a short name for the home screen: ${m.short_name}`);
  assert.equal(m.display, 'standalone');
  assert.ok(new URL(m.start_url, BASE).pathname.startsWith(new URL(m.scope, BASE).pathname), 'the start URL is in scope');
  assert.equal(m.theme_color, got.theme, 'the page\'s theme colour is the manifest\'s');
  assert.ok(got.icons.length >= 1);
  for (const i of got.icons) {
    assert.ok(i.width >= 512 && i.width === i.height, `${i.src} (${i.purpose}) loads square at 512 px or more: ${i.width}×${i.height}`);
    assert.ok(shell.includes(new URL(i.src, BASE).pathname), `${i.src} is in the service worker's shell`);
  }
  assert.ok(got.icons.some((i) => (i.purpose || 'any').split(' ').includes('any')) && got.icons.some((i) => (i.purpose || '').split(' ').includes('maskable')),
    'an icon for any use and a maskable one');
  assert.ok(shell.includes(got.link), 'the manifest is in the service worker\'s shell');
}

test(`${ENGINE}: the web app's manifest, icons and service worker shell`, { skip: ENGINE === 'chromium' && 'checked with installability below' }, async () => {
  const { open } = await import('./driver.js');
  const p = await open(ENGINE, { width: 1280, height: 800 });
  try {
    await p.goto(BASE + '/');
    await p.waitFor(() => !!document.querySelector('#auth:not([hidden])'));
    checkManifest(await p.eval(manifestInPage));
  } finally {
    await p.close();
  }
});

test('chromium: installable (no installability error), and not without its manifest', { skip: ENGINE !== 'chromium' && 'Chromium only' }, async () => {
  const { chromium } = await import('playwright-core');
  const { mkdtempSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  // A profile of its own: an incognito context is never installable.
  const profile = mkdtempSync(join(tmpdir(), 'pa-pwa-'));
  const ctx = await chromium.launchPersistentContext(profile, { executablePath: process.env.PA_CHROMIUM || '/usr/bin/chromium', headless: true,
    viewport: { width: 390, height: 844 }, args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run'] });
  try {
    // The control first (before a service worker serves the page): without its manifest
    // link, the same page is not installable.
    const bare = await ctx.newPage();
    await bare.route(BASE + '/', async (route) => {
      const res = await route.fetch();
      await route.fulfill({ response: res, body: (await res.text()).replace(/<link rel="manifest"[^>]*>/, '') });
    });
    await bare.goto(BASE + '/');
    await bare.waitForSelector('#auth:not([hidden])');
    const without = (await (await ctx.newCDPSession(bare)).send('Page.getInstallabilityErrors')).installabilityErrors.map((e) => e.errorId);
    assert.ok(without.length > 0, 'without its manifest the page is not installable');
    await bare.close();

    const page = await ctx.newPage();
    await page.goto(BASE + '/');
    await page.waitForSelector('#auth:not([hidden])');
    checkManifest(await page.evaluate(manifestInPage));
    // The service worker controls the page once it is active.
    await page.waitForFunction(async () => !!(await navigator.serviceWorker.getRegistration())?.active, null, { timeout: 20000 });
    await page.reload();
    await page.waitForFunction(() => !!navigator.serviceWorker.controller, null, { timeout: 15000 });
    const cdp = await ctx.newCDPSession(page);
    const manifest = await cdp.send('Page.getAppManifest');
    assert.deepEqual(manifest.errors, [], 'the manifest parses without error');
    const { installabilityErrors } = await cdp.send('Page.getInstallabilityErrors');
    assert.deepEqual(installabilityErrors, [], 'Chromium finds nothing that stops installing it');
    console.log(`chromium: installable; without the manifest: ${without.join(', ')}`);
  } finally {
    await ctx.close();
    rmSync(profile, { recursive: true, force: true });
  }
});
