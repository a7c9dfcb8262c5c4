// Issue 34 item 5: an installable web app. In Chromium, the one engine that says why a page
// is or is not installable (DevTools Page.getInstallabilityErrors): no installability error,
// while the same page without its manifest link has some (the check can fail). Firefox and
// WebKit check the manifest, its icons and the shell in chat.test.js.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BASE } from '../e2e/helpers.js';
import { manifestInPage, checkManifest } from './manifest.js';

const ENGINE = process.env.PA_ENGINE;

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
