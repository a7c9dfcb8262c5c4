// Follows the user's change feed (GET /api/conversations/feed): conversations created,
// renamed or deleted and messages sent in another tab, the CLI or a phone reach this tab
// within a second, through the same long-poll as a run's events. The feed only notifies;
// when it reports a hole (reset) the tab reads its lists again.
import { ApiError } from './api.js';

/**
 * watchFeed(api, { from, onEvents, onReset }) long-polls until stop(). `from` is the
 * position the tab's lists were read at (null: ask for the current one first).
 */
export function watchFeed(api, { from = null, onEvents, onReset, wait = 20, win = globalThis } = {}) {
  let stopped = false;
  let ctrl = null;
  let after = from;
  let backoff = 500;
  let wake = null;
  const sleep = (ms) => new Promise((r) => { const t = setTimeout(r, ms); wake = () => { clearTimeout(t); r(); }; });
  const poke = () => { if (wake) wake(); };
  win.addEventListener?.('online', poke);
  win.document?.addEventListener?.('visibilitychange', poke);
  const loop = async () => {
    while (!stopped) {
      ctrl = new AbortController();
      try {
        if (after === null) {
          after = (await api.feed(null, 0, ctrl.signal)).next;
          continue;
        }
        const asked = Date.now();
        const b = await api.feed(after, wait, ctrl.signal);
        backoff = 500;
        if (stopped) break;
        if (b.reset) {
          after = b.next;
          await onReset?.();
        } else if (b.events.length) {
          after = b.next;
          await onEvents?.(b.events);
        } else if (Date.now() - asked < 1000) {
          await sleep(1500); // answered at once without waiting (see follow.js)
        }
      } catch (e) {
        if (stopped) break;
        await sleep(e instanceof ApiError && e.retryAfter ? e.retryAfter * 1000 : backoff);
        backoff = Math.min(backoff * 2, 15000);
      }
    }
    win.removeEventListener?.('online', poke);
    win.document?.removeEventListener?.('visibilitychange', poke);
  };
  const done = loop();
  return { stop() { stopped = true; poke(); ctrl?.abort(); }, done, position: () => after };
}
