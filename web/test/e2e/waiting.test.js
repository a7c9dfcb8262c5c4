// Issue 32 items 3–5: every waiting state's card says why (which model holds the device,
// for how long, whether its holder waits for its owner — never another member's name or
// text), its position, and how long it has waited; and the system panel agrees. At
// 1280×800 and 390×844. The reasons are the agent's own words (agent/gpu.busy and
// BoundNote, executor parkedReason, pausedReason), served by a scripted /api.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { launch, signUp } from './helpers.js';
import { fakeApi, run, ev, events } from './fake.js';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

const at = (msAgo) => new Date(Date.now() - msAgo).toISOString();
const HELD = 'the device is held by run re038ef2 (qwen3-30b-a3b-q4, running for 3 min), which is waiting for its owner\'s approval; '
  + 'qwen3-14b-q5 loads when it finishes; later jobs for qwen3-30b-a3b-q4 may go first to save a swap; none will after 10 min more';
const REACQUIRE = 'approved; waiting for the xtx GPU again (released while waiting for the approval); the GPU now serves qwen3-30b-a3b-q4: '
  + 'qwen3-14b-q5 loads again (the last swap took 12s)';
const PAUSED = 'paused for a model swap: qwen3-30b-a3b-q4 runs first; it resumes where it stopped';

// Each waiting state: [run id, status, phase, reason, position, what the card must say].
const STATES = [
  ['r1', 'queued', null, 'waiting for the xtx queue', null],
  ['r2', 'waiting_for_resource', 'waiting for resource', HELD, 2],
  ['r3', 'waiting_for_resource', 'loading the model', 'loading qwen3-14b-q5', 1],
  ['r4', 'waiting_for_resource', 'waiting for resource', REACQUIRE, 1],
  ['r5', 'waiting_for_resource', 'paused', PAUSED, 3],
];

function fixture() {
  const conv = { id: 'c1', title: 'Jobs', lastActivityAt: at(0), createdAt: at(600000) };
  const messages = [];
  const runs = [];
  const evs = {};
  STATES.forEach(([id, status, phase, reason, pos], i) => {
    messages.push({ id: 'm-' + id, sequence: i + 1, role: 'user', text: `job ${id}`, runId: id, createdAt: at(300000) });
    runs.push(run(id, { role: i % 2 ? 'coding' : 'research', status, terminal: false, phase, queueReason: reason, queuePosition: pos,
      queuedAt: at(4 * 60000 + 5000), startedAt: null }));
    evs[id] = events(ev('run.status', { status, phase, queueReason: reason, queuePosition: pos }));
  });
  // The member's own job waiting for their approval: it holds no device meanwhile.
  messages.push({ id: 'm-r6', sequence: 9, role: 'user', text: 'clean up', runId: 'r6', createdAt: at(300000) });
  runs.push(run('r6', { role: 'coding', status: 'waiting_for_approval', terminal: false, phase: 'waiting for approval', queuedAt: at(4 * 60000 + 5000), startedAt: null }));
  evs.r6 = events(ev('run.status', { status: 'running', phase: 'thinking' }),
    ev('approval.request', { requestId: 'a1', command: 'rm -rf build/', description: 'recursive delete', choices: ['once', 'deny'] }));
  const system = {
    devices: [{ device: 'xtx', state: 'active', loadedModel: 'qwen3-30b-a3b-q4', activeModel: 'qwen3-30b-a3b-q4', stale: false }],
    // r1 not taken yet; r2–r5 taken and waiting in the agent's GPU manager; another member's
    // job running; r6 waiting for its owner, holding nothing.
    queues: [{ name: 'gpu:xtx', pending: 1, waiting: 4, active: 1, approval: 1, paused: false }], staleAfterMs: 30000,
  };
  return { conversations: [conv], messages: { c1: messages }, runs: { c1: runs }, events: evs, system };
}

for (const [w, h] of [[1280, 800], [390, 844]]) {
  test(`each waiting state says why, its position and how long, and the panel agrees (${w}×${h})`, async () => {
    const phone = w < 600;
    const opts = { viewport: { width: w, height: h }, ...(phone ? { deviceScaleFactor: 2, isMobile: true, hasTouch: true } : {}) };
    const page = await signUp(browser, opts, (p) => fakeApi(p, fixture()));
    await page.waitForFunction((n) => document.querySelectorAll('.run').length >= n, STATES.length + 1);
    await page.waitForFunction(() => /later jobs for qwen3-30b-a3b-q4/.test(document.getElementById('messages').innerText));
    const cards = await page.$$eval('.run', (l) => l.map((c) => c.innerText.replace(/\s+/g, ' ')));
    for (const [id, , phase, reason, pos] of STATES) {
      const card = cards.find((c) => c.includes(reason.slice(0, 40)));
      assert.ok(card, `${id}: a card with its reason (${reason.slice(0, 40)}…) among ${JSON.stringify(cards)}`);
      assert.ok(card.includes(reason), `${id}: the whole reason: ${card}`);
      if (pos) assert.match(card, new RegExp(`\\(position ${pos}\\)`), `${id}: its position`);
      assert.match(card, /waiting 4 min/, `${id}: how long it has waited`);
      if (phase === 'loading the model') assert.match(card, /loading the model/, `${id}: its phase`);
      assert.doesNotMatch(card, /@example\.com|Tester/, `${id}: no member's name`);
    }
    const approval = cards.find((c) => /needs your approval/.test(c));
    assert.ok(approval, 'the job waiting for its owner says so');
    assert.match(approval, /rm -rf build\//);
    assert.match(approval, /waiting 4 min/);
    // Every card is on screen in full width (no horizontal scrolling on a phone).
    assert.equal(await page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth + 1), false, 'no horizontal scrolling');
    // The panel: the xtx serving the model the cards name, and the counts the cards show.
    if (phone && !(await page.isVisible('#system'))) await page.click('#menu');
    await page.waitForSelector('#system [data-device="xtx"]', { state: 'visible' });
    const dev = await page.textContent('#system [data-device="xtx"]');
    assert.match(dev, /qwen3-30b-a3b-q4/);
    const queue = await page.textContent('#system [data-queue="gpu:xtx"]');
    assert.match(queue, /5 waiting, 1 running, 1 waiting for approval/);
    const waitingCards = cards.filter((c) => /waiting for the GPU|queued/.test(c)).length;
    assert.equal(waitingCards, 5, 'the five jobs waiting for the xtx');
    assert.deepEqual(page.errors, []);
  });
}
