// The web app manifest as the page links it, read in the page itself, and what an
// installable app needs of it (pwa.test.js in Chromium, chat.test.js in Firefox and WebKit).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { BASE } from '../e2e/helpers.js';

const shell = JSON.parse(/const SHELL = (\[[^\]]*\])/.exec(readFileSync(new URL('../../sw.js', import.meta.url), 'utf8'))[1].replace(/'/g, '"'));

/** What the page's manifest says and how its icons load, read in the page itself. */
export function manifestInPage() {
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

export function checkManifest(got) {
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

