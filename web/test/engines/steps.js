// Steps the engine tests share (chat.test.js, habits.test.js), over driver.js's page API:
// every user action a real input of the engine.
import { invite, BASE } from '../e2e/helpers.js';

export const ENGINE = process.env.PA_ENGINE;
export const SIZES = [{ width: 1280, height: 800 }, { width: 390, height: 844 }];
export const SHOTS = new URL('../../../build/screenshots/', import.meta.url).pathname;

let n = 0;
/** A fresh member, signed up through the form with an invitation; returns the email. */
export async function signUp(p, base = BASE) {
  await p.goto(`${base}/#invite=${await invite()}`);
  await p.waitFor(() => !!document.querySelector('#auth:not([hidden]) #name-row:not([hidden])'));
  const email = `${ENGINE}${Date.now()}${n++}@example.com`;
  await p.fill('#email', email);
  await p.fill('#password', 'password-' + email);
  await p.fill('#name', 'Tester');
  await p.click('#auth-submit');
  await p.waitFor(() => {
    // A refusal fails at once, with what the page said.
    const said = ['auth-error', 'gate-error'].map((id) => document.getElementById(id)?.textContent).filter(Boolean).join('; ');
    if (said) throw new Error('sign-up refused: ' + said);
    return !!document.querySelector('#app:not([hidden])') && !!document.querySelector('#messages .empty, #messages .msg');
  });
  return email;
}

/** Signs in through the form (the page shows it). */
export async function signIn(p, email) {
  await p.fill('#email', email);
  await p.fill('#password', 'password-' + email);
  await p.click('#auth-submit');
}

/** Waits until the newest run card (after `before` cards) reaches a status; another end fails at once. */
export async function waitRun(p, status, before = 0, timeout = 30000) {
  return p.waitFor(([b, want]) => {
    const cards = document.querySelectorAll('.run');
    const st = cards.length > b && cards[cards.length - 1].querySelector('.status');
    const ended = st && ['completed', 'failed', 'cancelled', 'interrupted'].find((x) => st.classList.contains(x));
    if (ended && ended !== want) throw new Error(`the run ended ${ended} (not ${want}): ${cards[cards.length - 1].textContent}`);
    return ended === want;
  }, [before, status], timeout);
}

/** The number of run cards on screen. */
export const runCount = (p) => p.eval(() => document.querySelectorAll('.run').length);

/** Sends a message and follows its answer, recording every length the answer had on screen. */
export async function sendAndWatch(p, text, { role = 'chat', timeout = 30000, status = 'completed' } = {}) {
  const before = await runCount(p);
  await p.select('#role', role);
  await p.eval(() => {
    window.__lengths = [];
    const box = document.getElementById('messages');
    const seen = () => {
      const a = [...box.querySelectorAll('.msg.assistant:not([hidden]) .body')].pop();
      const l = a ? a.textContent.length : 0;
      if (window.__lengths[window.__lengths.length - 1] !== l) window.__lengths.push(l);
    };
    window.__observer?.disconnect();
    window.__observer = new MutationObserver(seen);
    window.__observer.observe(box, { subtree: true, childList: true, characterData: true });
  });
  await p.fill('#draft', text);
  await p.click('#send');
  await waitRun(p, status, before, timeout);
  return p.eval(() => {
    window.__observer.disconnect();
    return { lengths: window.__lengths, answer: [...document.querySelectorAll('.msg.assistant:not([hidden]) .body')].pop()?.innerText.trim() };
  });
}

/** Waits until the app shows the conversation again, saying what the page showed if not. */
export async function shown(p, timeout = 30000) {
  try {
    await p.waitFor(() => !!document.querySelector('#app:not([hidden])') && !!document.querySelector('.msg.user'), null, timeout);
  } catch (e) {
    const seen = await p.eval(() => ({ url: location.href, auth: !document.getElementById('auth')?.hidden, app: !document.getElementById('app')?.hidden,
      said: ['auth-error', 'gate-error', 'chat-error', 'net', 'live-note'].map((id) => `${id}: ${document.getElementById(id)?.textContent || ''}`).join(' | '),
      messages: document.getElementById('messages')?.textContent.slice(0, 200), controlled: !!navigator.serviceWorker?.controller,
      ready: document.readyState, config: typeof window.PA_CONFIG, sdk: typeof window.Appwrite })).catch((err) => String(err));
    const log = (await requests().catch(() => [])).slice(-12).map((r) => `${r.method} ${r.path} ${r.status}`);
    e.message += `; the page showed ${JSON.stringify(seen)}; page errors ${JSON.stringify(await p.errors().catch(() => []))}; the front's last requests ${JSON.stringify(log)}`;
    throw e;
  }
}

/** What the test front passed on to the stack (scripts/dev engines_test.go): method, path, status. */
export async function requests(base = BASE) { return (await (await fetch(base + '/_engines/requests')).json()) || []; }

/**
 * catchDownloads records what the app hands the engine to save: the blob behind each link
 * it clicks with a download name (the page's CSP lets no fetch read a blob: URL back).
 * window.__downloads collects {name, text}. The click itself still saves the file.
 */
export function catchDownloads(p) {
  return p.eval(() => {
    if (window.__downloads) return;
    window.__downloads = [];
    const blobs = new Map();
    const make = URL.createObjectURL;
    URL.createObjectURL = (b) => { const u = make.call(URL, b); blobs.set(u, b); return u; };
    const click = HTMLAnchorElement.prototype.click;
    HTMLAnchorElement.prototype.click = function () {
      const name = this.download;
      if (name && blobs.has(this.href)) blobs.get(this.href).text().then((text) => window.__downloads.push({ name, text }));
      return click.call(this);
    };
  });
}

/** The phone layout keeps the conversation list behind ☰: opened when it is not showing. */
export async function openPanel(p) {
  if (await p.eval(() => innerWidth >= 720 || getComputedStyle(document.getElementById('sidebar')).display !== 'none')) return;
  await p.click('#menu');
  await p.waitFor(() => getComputedStyle(document.getElementById('sidebar')).display !== 'none');
}
