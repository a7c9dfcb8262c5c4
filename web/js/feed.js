// Follows the user's change feed: conversations created, renamed or deleted and messages
// sent in another tab, the CLI or a phone reach this tab within a second, over the stream
// service (GET /stream/feed, SSE) and through the function long-poll only while the stream
// service is unreachable (sse.js live). The feed only notifies; when it reports a hole
// (reset) the tab reads its lists again. With onSystem the stream also carries the system
// panel's state ("system" messages, no id), so a tab that watches reads no function.
import { live } from './sse.js';

/**
 * watchFeed(api, { from, onEvents, onReset }) follows until stop(). `from` is the position
 * the tab's lists were read at (null: the stream's first message gives the current one).
 * onStatus gets sse.js live's status ({fallback, offline, note}).
 */
export function watchFeed(api, { from = null, onEvents, onReset, onSystem, onStatus, win = globalThis, timing = {} } = {}) {
  let after = from;
  const sys = onSystem ? 'system=1' : '';
  const spec = {
    path: () => (after === null ? '/stream/feed' + (sys ? '?' + sys : '') : `/stream/feed?after=${after}` + (sys ? '&' + sys : '')),
    cursor: () => after,
    async onMessages(msgs) {
      let evs = [];
      const flush = async () => { if (evs.length) { const e = evs; evs = []; await onEvents?.(e); } };
      for (const m of msgs) {
        if (m.event === 'system') {
          // Not a feed event: its id is only the one in force.
          await flush();
          try { onSystem?.(JSON.parse(m.data)); } catch { /* a later state comes */ }
          continue;
        }
        const id = Number(m.id);
        if (m.event === 'reset') {
          await flush();
          let next = id;
          try { next = JSON.parse(m.data).next ?? id; } catch { /* the id says it */ }
          const hadPosition = after !== null;
          after = next;
          if (hadPosition) await onReset?.();
          continue;
        }
        try { evs.push(JSON.parse(m.data)); } catch { continue; }
        if (Number.isFinite(id)) after = id;
      }
      await flush();
      return false;
    },
    onEnd() { return false; }, // the feed has no end: a closed stream is reopened
    async poll(wait, signal) {
      if (after === null) {
        after = (await api.feed(null, 0, signal)).next;
        return { done: false, count: 1 };
      }
      const b = await api.feed(after, wait, signal);
      if (b.reset) {
        after = b.next;
        await onReset?.();
        return { done: false, count: 1 };
      }
      if (b.events.length) {
        after = b.next;
        await onEvents?.(b.events);
      }
      return { done: false, count: b.events.length };
    },
    onError() { return false; },
    onStatus,
  };
  const l = live(api, spec, { win, timing });
  return { stop: l.stop, done: l.done, position: () => after, status: l.status };
}
