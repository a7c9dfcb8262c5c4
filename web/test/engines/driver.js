// One small page API over the two engines the Chromium suite (test/e2e, playwright-core)
// does not reach: Firefox ESR over WebDriver BiDi (puppeteer-core talking to Debian's
// firefox-esr directly: no geckodriver) and WebKit over classic W3C WebDriver (Debian's
// WebKitWebDriver driving WebKitGTK's MiniBrowser under Xvfb). Every action is a real input
// of the engine's automation (clicks, key strokes, file selection), never a DOM shortcut.
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const ENGINES = {
  firefox: { binary: process.env.PA_FIREFOX || '/usr/bin/firefox-esr', debian: 'firefox-esr' },
  webkit: { binary: process.env.PA_WEBKIT_DRIVER || '/usr/bin/WebKitWebDriver', debian: 'webkit2gtk-driver',
    browser: process.env.PA_WEBKIT_BROWSER || '/usr/lib/x86_64-linux-gnu/webkit2gtk-4.1/MiniBrowser', xvfb: '/usr/bin/Xvfb' },
};

/** missing: why an engine cannot run here ('' when it can). */
export function missing(engine) {
  const e = ENGINES[engine];
  if (!e) return `unknown engine ${engine}`;
  const need = [e.binary, e.browser, e.xvfb].filter(Boolean).filter((p) => !existsSync(p));
  return need.length ? `missing ${need.join(', ')} (make deps installs Debian's ${e.debian}${e.xvfb ? ' and xvfb' : ''})` : '';
}

/**
 * open starts the engine with one page of the given inner size and returns it.
 * opts.downloads: a folder downloads are saved to (without it, a scratch folder: never the
 * user's own Downloads).
 * Third-party cookies are always blocked (Firefox: cookieBehavior 1; MiniBrowser:
 * --cookies-policy=no-third-party, with ITP on).
 */
export async function open(engine, { width, height, downloads }) {
  const why = missing(engine);
  if (why) throw new Error(why);
  return engine === 'firefox' ? openFirefox({ width, height, downloads }) : openWebKit({ width, height, downloads });
}

// --- Firefox: puppeteer-core over WebDriver BiDi ------------------------------------------

async function openFirefox({ width, height, downloads }) {
  const { default: puppeteer } = await import('puppeteer-core');
  const prefs = { 'network.cookie.cookieBehavior': 1 };
  // Without a folder, downloads go to a scratch one (never the user's own Downloads).
  const own = downloads ? null : mkdtempSync(join(tmpdir(), 'pa-firefox-downloads-'));
  Object.assign(prefs, { 'browser.download.folderList': 2, 'browser.download.dir': downloads || own, 'browser.download.useDownloadDir': true,
    'browser.download.always_ask_before_handling_new_types': false, 'browser.download.start_downloads_in_tmp_dir': false });
  const browser = await puppeteer.launch({ browser: 'firefox', executablePath: ENGINES.firefox.binary, headless: true,
    protocol: 'webDriverBiDi', extraPrefsFirefox: prefs, timeout: 120000, protocolTimeout: 120000 });
  const page = await browser.newPage();
  await page.setViewport({ width, height });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => { if (m.type() === 'error') errors.push('console: ' + m.text()); });
  // A chord such as 'Control+Shift+O': the modifiers held down, the key pressed, released;
  // times: pressed again that many times (modifiers held throughout).
  const press = async (chord, times = 1) => {
    const keys = chord === '+' ? ['+'] : chord.split('+');
    const key = keys.pop();
    for (const m of keys) await page.keyboard.down(m);
    for (let i = 0; i < times; i++) await page.keyboard.press(key);
    for (const m of keys.reverse()) await page.keyboard.up(m);
  };
  return {
    engine: 'firefox', version: await browser.version(),
    // Uncaught errors and what the engine reported as errors (CORS refusals among them).
    errors: async () => errors,
    goto: (url) => page.goto(url, { waitUntil: 'load' }),
    reload: () => page.reload({ waitUntil: 'load' }),
    eval: (fn, ...args) => page.evaluate(fn, ...args),
    waitFor: (fn, arg, timeout = 30000) => waitFor((a) => page.evaluate(fn, a), arg, timeout, fn),
    click: (sel) => page.click(sel),
    hover: (sel) => page.hover(sel),
    // A field is emptied as a person would: clicked, everything selected, deleted.
    async fill(sel, text) {
      await page.click(sel);
      await press('Control+a');
      await page.keyboard.press('Backspace');
      if (text) await page.keyboard.type(text);
    },
    type: (text) => page.keyboard.type(text),
    press,
    // Same-document history too (the app's /c/<id> addresses): puppeteer waits for either.
    back: () => page.goBack(),
    forward: () => page.goForward(),
    async select(sel, value) { await page.select(sel, value); },
    async setFiles(sel, paths) { await (await page.$(sel)).uploadFile(...paths); },
    screenshot: (path) => page.screenshot({ path }),
    fit: async () => {},
    async close() {
      try { await browser.close(); } finally { if (own) rmSync(own, { recursive: true, force: true }); }
    },
  };
}

// --- WebKit: classic WebDriver (WebKitWebDriver → MiniBrowser under Xvfb) -------------------

const ELEMENT = 'element-6066-11e4-a52e-4f735466cecf';
// WebDriver's code points for the keys the tests press by name.
const KEYS = { Control: '\uE009', Shift: '\uE008', Alt: '\uE00A', Meta: '\uE03D', Enter: '\uE007', Escape: '\uE00C', Backspace: '\uE003',
  Tab: '\uE004', Delete: '\uE017', ArrowUp: '\uE013', ArrowDown: '\uE015', ArrowLeft: '\uE012', ArrowRight: '\uE014' };

async function openWebKit({ width, height, downloads }) {
  const { browser, xvfb, binary } = ENGINES.webkit;
  const children = [];
  const kill = () => { for (const c of children.reverse()) { try { c.kill('SIGTERM'); } catch { /* gone */ } } };
  process.once('exit', kill);
  try {
    // A display of its own (-displayfd: Xvfb picks a free one and says which).
    const x = spawn(xvfb, ['-displayfd', '3', '-screen', '0', '1600x1200x24', '-nolisten', 'tcp'], { stdio: ['ignore', 'ignore', 'pipe', 'pipe'] });
    children.push(x);
    const display = await new Promise((resolve, reject) => {
      let out = '';
      const late = setTimeout(() => reject(new Error('Xvfb gave no display in 30 s')), 30000);
      x.stdio[3].on('data', (d) => { out += d; if (out.includes('\n')) { clearTimeout(late); resolve(':' + out.trim()); } });
      x.on('exit', (c) => { clearTimeout(late); reject(new Error(`Xvfb exited (${c})`)); });
    });
    // MiniBrowser's toolbar would hold its window wider than a phone: a user stylesheet of
    // GTK (not of the web content, which WebKit draws itself) lets it shrink.
    const cfg = mkdtempSync(join(tmpdir(), 'pa-webkit-'));
    children.push({ kill: () => rmSync(cfg, { recursive: true, force: true }) });
    mkdirSync(join(cfg, 'gtk-3.0'));
    writeFileSync(join(cfg, 'gtk-3.0', 'gtk.css'), 'window * { min-width: 0; min-height: 0; padding: 0; margin: 0; font-size: 1px; }\n');
    // MiniBrowser saves downloads in GLib's download folder, which this file names.
    // (The folder must exist: MiniBrowser falls back to ~/Downloads.)
    if (!downloads) mkdirSync(join(cfg, 'downloads'));
    writeFileSync(join(cfg, 'user-dirs.dirs'), `XDG_DOWNLOAD_DIR="${downloads || join(cfg, 'downloads')}"\n`);
    const port = await freePort();
    // GTK's own data (the list of recent files it adds each download to) stays in the scratch folder too.
    const d = spawn(binary, [`--port=${port}`], { env: { ...process.env, DISPLAY: display, XDG_CONFIG_HOME: cfg, XDG_DATA_HOME: cfg }, stdio: ['ignore', 'ignore', 'pipe'] });
    children.push(d);
    let driverLog = '';
    d.stderr.on('data', (b) => { driverLog = (driverLog + b).slice(-4000); });
    const base = `http://127.0.0.1:${port}`;
    await waitFor(async () => { try { return (await fetch(base + '/status')).ok; } catch { return false; } }, null, 30000, 'WebKitWebDriver /status');
    const wd = async (method, path, body) => {
      const res = await fetch(base + path, { method, headers: { 'Content-Type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
      const j = await res.json();
      if (!res.ok) throw new Error(`WebDriver ${method} ${path}: ${j.value?.error}: ${j.value?.message}${driverLog ? '\n' + driverLog : ''}`);
      return j.value;
    };
    const s = await wd('POST', '/session', { capabilities: { alwaysMatch: { browserName: 'MiniBrowser',
      'webkitgtk:browserOptions': { binary: browser, args: ['--automation', '--cookies-policy=no-third-party', '--enable-itp'] } } } });
    const sp = `/session/${s.sessionId}`;
    await wd('POST', sp + '/timeouts', { script: 60000, pageLoad: 60000 });
    // The window's outer size holds the browser's own frame: size it so the page's inner
    // size is the one asked for.
    const inner = async () => run('return [window.innerWidth, window.innerHeight]');
    const run = async (script, args = []) => wd('POST', sp + '/execute/sync', { script, args });
    const fit = async () => {
      for (let i = 0; i < 5; i++) {
        const [iw, ih] = await inner();
        if (iw === width && ih === height) return;
        const r = await wd('GET', sp + '/window/rect');
        await wd('POST', sp + '/window/rect', { width: r.width + (width - iw), height: r.height + (height - ih) });
      }
      throw new Error(`the page is ${await inner()}, not ${[width, height]}`);
    };
    await wd('POST', sp + '/window/rect', { width, height });
    await fit();
    const actions = async (list) => {
      try { await wd('POST', sp + '/actions', { actions: list }); } finally { await wd('DELETE', sp + '/actions'); }
    };
    const find = async (sel) => (await wd('POST', sp + '/element', { using: 'css selector', value: sel }))[ELEMENT];
    // A function runs in the page with JSON arguments; its (awaited) result comes back.
    const evaluate = async (fn, ...args) => {
      const r = await wd('POST', sp + '/execute/async', { args: [JSON.stringify(args)], script:
        `const done = arguments[arguments.length - 1];
         Promise.resolve().then(() => (${fn}).apply(null, JSON.parse(arguments[0])))
           .then((v) => done({ ok: v === undefined ? null : v }), (e) => done({ err: String(e && e.stack || e) }));` });
      if (r && 'err' in r) throw new Error('in the page: ' + r.err);
      return r?.ok;
    };
    // Classic WebDriver has no error events: each loaded page collects its own uncaught
    // errors and rejections from when it is loaded (a script error during load is missed).
    const errors = [];
    const collect = () => evaluate(() => {
      window.__errors = [];
      addEventListener('error', (e) => window.__errors.push(String(e.message || e.error)));
      addEventListener('unhandledrejection', (e) => window.__errors.push('unhandled rejection: ' + String(e.reason?.message || e.reason)));
    });
    const drain = async () => { errors.push(...(await evaluate(() => window.__errors || []).catch(() => []))); };
    return {
      engine: 'webkit', version: s.capabilities.browserVersion,
      async errors() { await drain(); await collect(); return errors; },
      async goto(url) { await drain(); await wd('POST', sp + '/url', { url }); await collect(); },
      async reload() { await drain(); await wd('POST', sp + '/refresh', {}); await collect(); },
      eval: evaluate,
      waitFor: (fn, arg, timeout = 30000) => waitFor((a) => evaluate(fn, a), arg, timeout, fn),
      async click(sel) { await wd('POST', `${sp}/element/${await find(sel)}/click`, {}); },
      async hover(sel) {
        await actions([{ type: 'pointer', id: 'mouse', parameters: { pointerType: 'mouse' },
          actions: [{ type: 'pointerMove', duration: 0, origin: { [ELEMENT]: await find(sel) }, x: 0, y: 0 }] }]);
      },
      // A field is emptied as a person would: clicked, everything selected, deleted.
      async fill(sel, text) {
        const id = await find(sel);
        await wd('POST', `${sp}/element/${id}/click`, {});
        await this.press('Control+a');
        await this.press('Backspace');
        if (text) await wd('POST', `${sp}/element/${id}/value`, { text });
      },
      // Key strokes to the focused element (W3C actions).
      async type(text) {
        await actions([{ type: 'key', id: 'keyboard', actions: [...text].flatMap((c) => [{ type: 'keyDown', value: c }, { type: 'keyUp', value: c }]) }]);
      },
      async press(chord, times = 1) {
        const keys = (chord === '+' ? ['+'] : chord.split('+')).map((k) => KEYS[k] || k);
        const key = keys.pop();
        const strokes = Array.from({ length: times }, () => [{ type: 'keyDown', value: key }, { type: 'keyUp', value: key }]).flat();
        await actions([{ type: 'key', id: 'keyboard', actions: [...keys.map((value) => ({ type: 'keyDown', value })), ...strokes, ...keys.reverse().map((value) => ({ type: 'keyUp', value }))] }]);
      },
      // History, the app's same-document /c/<id> addresses included.
      async back() { await wd('POST', sp + '/back', {}); },
      async forward() { await wd('POST', sp + '/forward', {}); },
      // An option is chosen by clicking it, as a person would.
      async select(sel, value) { await wd('POST', `${sp}/element/${await find(`${sel} option[value="${value}"]`)}/click`, {}); },
      // A file input takes the files' paths as its "keys" (one per line).
      async setFiles(sel, paths) { await wd('POST', `${sp}/element/${await find(sel)}/value`, { text: paths.join('\n') }); },
      // MiniBrowser shows a bar of downloads above the page once one starts (and resizes it
      // as they finish): the window grows back to the page size asked for.
      fit,
      async screenshot(path) { writeFileSync(path, Buffer.from(await wd('GET', sp + '/screenshot'), 'base64')); },
      async close() {
        try { await wd('DELETE', sp); } finally { kill(); process.removeListener('exit', kill); }
      },
    };
  } catch (e) {
    kill();
    throw e;
  }
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.listen(0, '127.0.0.1', () => { const { port } = srv.address(); srv.close(() => resolve(port)); });
    srv.on('error', reject);
  });
}

/** waitFor polls check(arg) until it is truthy, and says what it waited for when it is not. */
export async function waitFor(check, arg, timeout, what) {
  const end = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      const v = await check(arg);
      if (v) return v;
      last = v;
    } catch (e) { last = e.message; }
    if (Date.now() > end) throw new Error(`timed out after ${timeout} ms waiting for ${String(what).slice(0, 300)} (last: ${JSON.stringify(last)?.slice(0, 500)})`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A scratch folder (removed by the caller). */
export function scratch(prefix) { return mkdtempSync(join(tmpdir(), prefix)); }
export { mkdirSync, rmSync };
