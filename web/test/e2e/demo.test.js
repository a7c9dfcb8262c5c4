// The scripted demo model shows the renderer: answers keep their spacing, and "#markdown"
// streams multi-line Markdown (list, table, code block) rendered safely.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { launch, signUp, send, waitRun, lastAnswer } from './helpers.js';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

// A member's first research or coding job starts their own Hermes (make dev runs the real
// one per member): seconds on an idle host, tens of seconds on a loaded 2-core one.
const HERMES_START = 120000;

test('the demo research answer keeps its spaces and its turns apart', async () => {
  const page = await signUp(browser);
  await send(page, '#research a topic', 'research');
  await waitRun(page, 'completed', HERMES_START);
  await page.waitForFunction(() => /notes\.md\./.test(document.querySelector('.msg.assistant:not([hidden]) .body')?.innerText || ''));
  const text = (await lastAnswer(page)).replace(/\s+/g, ' ').trim();
  assert.equal(text, 'Researching… collecting sources. I saved my notes as notes.md.');
});

test('the demo "#markdown" answer renders as Markdown: list, table, highlighted code, HTML as text', async () => {
  const page = await signUp(browser);
  await send(page, 'show me #markdown');
  await waitRun(page, 'completed', 30000);
  const a = page.locator('.msg.assistant:not([hidden])').last();
  await a.locator('.code .hljs-keyword').first().waitFor({ timeout: 10000 });
  assert.equal(await a.locator('h2').textContent(), 'Counting lines');
  assert.equal(await a.locator('ol li').count(), 3);
  assert.equal(await a.locator('table tbody tr').count(), 2);
  assert.equal(await a.locator('.code-bar span').first().textContent(), 'python');
  assert.match(await lastAnswer(page), /<b>not bold<\/b>/, 'model HTML is shown as text');
  assert.equal(await a.locator('.body b').count(), 0, 'never live HTML');
  assert.deepEqual(page.errors, []);
});
