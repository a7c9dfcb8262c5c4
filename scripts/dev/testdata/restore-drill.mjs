// The browser half of TestRestoreDrillInTheBrowser (scripts/dev/restore_test.go), run by
// node with playwright-core (PA_PLAYWRIGHT, web/node_modules) driving Chromium.
//
//   populate: sign in at PA_BASE_URL as PA_EMAIL / PA_PASSWORD and hold a conversation:
//             two chat turns, then a research run that saves a file (the "#drill" script);
//             reports what is shown and downloads the file; then sends a fourth message
//             ("#slow") and returns while its answer streams (the backup catches it running).
//   verify:   sign in at PA_BASE_URL (the restored project), open the conversation, read
//             its history (waiting up to 10 s for PA_EXPECT, what populate saw, followed by
//             the fourth run settled) and download the research run's file.
// Prints one JSON line: {titles, history, cards, lastCard, file: {name, size, sha256}}.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';

const { chromium } = await import(process.env.PA_PLAYWRIGHT);
const [phase] = process.argv.slice(2);
const BASE = process.env.PA_BASE_URL;
const browser = await chromium.launch({
  executablePath: process.env.PA_CHROMIUM || '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run'],
});
try {
  const ctx = await browser.newContext({ acceptDownloads: true });
  const page = await ctx.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.setDefaultTimeout(20000);
  await page.addInitScript(() => {
    window.drillSeen = () => ({
      history: [...document.querySelectorAll('#messages .msg:not([hidden])')]
        .map((m) => (m.classList.contains('user') ? 'user: ' : 'assistant: ') + (m.querySelector('.body') || m).innerText.trim()),
      cards: [...document.querySelectorAll('.run')].map((c) => c.querySelector('.status')?.className || ''),
      lastCard: [...document.querySelectorAll('.run')].pop()?.innerText || '',
    });
  });
  await page.goto(BASE);
  await page.waitForSelector('#auth:not([hidden])');
  await page.fill('#email', process.env.PA_EMAIL);
  await page.fill('#password', process.env.PA_PASSWORD);
  await page.click('#auth-submit');
  await page.waitForSelector('#app:not([hidden])');

  const waitRun = (n, status) => page.waitForFunction(([n, st]) => {
    const cards = document.querySelectorAll('.run');
    return cards.length === n && cards[n - 1].querySelector('.status')?.classList.contains(st);
  }, [n, status], { timeout: 30000 });
  const send = async (text, role) => {
    await page.selectOption('#role', role);
    await page.fill('#draft', text);
    await page.click('#send');
  };

  if (phase === 'populate') {
    await page.waitForSelector('#messages .empty, #messages .msg');
    await send('first turn alpha', 'chat');
    await waitRun(1, 'completed');
    await send('second turn bravo', 'chat');
    await waitRun(2, 'completed');
    await send('save the #drill file', 'research');
    await waitRun(3, 'completed');
    await page.waitForSelector('.run .artifacts button.file');
  } else if (phase === 'verify') {
    await page.waitForSelector('#conversations button.conv');
    await page.click('#conversations button.conv');
    await page.waitForSelector('.msg.user');
    // Give the page up to 10 s to show what the source showed (PA_EXPECT); past that the
    // test compares what is shown and fails with the difference.
    const t0 = Date.now();
    await page.waitForFunction((want) => {
      const w = JSON.parse(want), s = window.drillSeen();
      return JSON.stringify([s.history.slice(0, w.history.length), s.cards.slice(0, w.cards.length)]) === JSON.stringify([w.history, w.cards])
        && s.cards.length === w.cards.length + 1 && !/running|queued/.test(s.cards[w.cards.length]);
    }, process.env.PA_EXPECT || '{}', { timeout: 10000 })
      .catch((e) => { if (e.name !== 'TimeoutError') throw e; });
    console.error(`restored history shown after ${Date.now() - t0} ms`);
  } else {
    throw new Error(`unknown phase ${phase}`);
  }
  const seen = await page.evaluate(() => window.drillSeen());
  await page.waitForSelector('.run .artifacts button.file');
  const [dl] = await Promise.all([page.waitForEvent('download'), page.click('.run .artifacts button.file')]);
  const bytes = readFileSync(await dl.path());
  const out = {
    titles: await page.$$eval('#conversations button.conv', (bs) => bs.map((b) => b.textContent)),
    ...seen,
    file: { name: dl.suggestedFilename(), size: bytes.length, sha256: createHash('sha256').update(bytes).digest('hex') },
    errors,
  };
  if (phase === 'populate') {
    // A run still running when the backup is taken: its answer has begun to stream.
    await send('a #slow answer', 'chat');
    await page.waitForFunction(() => {
      const cards = document.querySelectorAll('.run');
      const a = [...document.querySelectorAll('.msg.assistant:not([hidden]) .body')].pop();
      return cards.length === 4 && cards[3].querySelector('.status')?.classList.contains('running') && /slow/.test(a?.innerText || '');
    });
  }
  console.log(JSON.stringify(out));
} finally {
  await browser.close();
}
