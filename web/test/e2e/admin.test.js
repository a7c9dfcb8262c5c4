// The admin console (issue 17): only for accounts with the admin label, on the admin API
// the CLI uses — invitations and members, devices, harness profiles and routes (preview,
// then commit against the previewed revision; each route's GPU qualification and Qualify),
// role selection preview, the audit log.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { launch, signUp, shot, BASE } from './helpers.js';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

async function signInAdmin() {
  const ctx = await browser.newContext({ permissions: ['clipboard-read', 'clipboard-write'] });
  const page = await ctx.newPage();
  page.errors = [];
  page.on('pageerror', (e) => page.errors.push(e.message));
  await page.goto(BASE);
  await page.waitForSelector('#auth:not([hidden])');
  await page.fill('#email', process.env.PA_ADMIN_EMAIL);
  await page.fill('#password', process.env.PA_ADMIN_PASS);
  await page.click('#auth-submit');
  await page.waitForSelector('#app:not([hidden])');
  return page;
}

test('a member sees no admin console', async () => {
  const page = await signUp(browser);
  assert.equal(await page.isVisible('#admin-toggle'), false);
  assert.equal(await page.isVisible('#admin'), false);
});

test('the admin console: invitation, devices, a route change previewed and committed, selection preview, audit', async () => {
  const page = await signInAdmin();
  await page.waitForSelector('#admin-toggle:not([hidden])');
  await page.click('#admin-toggle');
  assert.equal(await page.getAttribute('#admin-toggle', 'aria-expanded'), 'true');
  await page.waitForSelector('#admin-routes li[data-id="chat"]');

  // An invitation link, to copy.
  await page.click('#admin-members .invite');
  await page.waitForSelector('#admin-members .invite-link');
  const link = await page.inputValue('#admin-members .invite-link');
  assert.match(link, /^http:\/\/[^/]+\/#invite=[A-Za-z0-9_-]{20,}$/);

  // Devices as /api/system reports them (the demo agent has no GPU telemetry: none yet).
  await page.waitForSelector('#admin-devices li');
  assert.match(await page.textContent('#admin-devices'), /— \w+|No GPU has reported yet/);

  // Edit the chat route: Preview shows what changes; Commit is for what was previewed.
  const before = await page.textContent('#admin-routes li[data-id="chat"]');
  const rev = Number(/ r(\d+)/.exec(before)[1]);
  await page.click('#admin-routes li[data-id="chat"] .edit');
  const input = JSON.parse(await page.inputValue('#admin-routes textarea'));
  assert.equal(input.routeId, 'chat');
  input.contextBudget = input.contextBudget - 1024;
  await page.fill('#admin-routes textarea', JSON.stringify(input, null, 2));
  assert.equal(await page.isDisabled('#admin-routes .commit'), true, 'nothing to commit before a preview');
  await page.click('#admin-routes .preview');
  await page.waitForSelector('#admin-routes .plan');
  const plan = await page.textContent('#admin-routes .plan');
  assert.match(plan, new RegExp(`chat: revision ${rev + 1} \\(based on ${rev}\\)`));
  assert.match(plan, /contextBudget/);
  assert.match(plan, /run/i, 'says which runs stay pinned');
  await page.click('#admin-routes .commit');
  await page.waitForFunction((r) => new RegExp(` r${r}\\b`).test(document.querySelector('#admin-routes li[data-id="chat"]')?.textContent || ''), rev + 1);
  assert.match(await page.textContent('#admin-routes .editor .admin-status'), new RegExp(`Committed: revision ${rev + 1}`));

  // Role selection: a preview of the current selection changes nothing.
  await page.waitForFunction(() => /"roles"/.test(document.querySelector('#admin-selection textarea').value));
  await page.click('#admin-selection .preview');
  await page.waitForSelector('#admin-selection .plan');
  assert.match(await page.textContent('#admin-selection .plan'), /settings\/system: revision \d+ \(based on \d+\)\.Nothing changes/);

  // The audit log shows the route commit.
  await page.waitForFunction(() => /chat/.test(document.querySelector('#admin-audit')?.textContent || ''));
  assert.match(await page.textContent('#admin-audit'), new RegExp(`r${rev} → r${rev + 1}`));

  // Each route shows its last GPU qualification (issue 20), with a Qualify button.
  const qual = '#admin-routes li[data-id="chat"] .qualification';
  await page.waitForSelector(qual);
  const verdict = await page.textContent(qual);
  assert.match(verdict, /^(✓ passed \d{4}-\d\d-\d\d \d\d:\d\d UTC|✗ failed .+|never qualified|for another model or budget — qualify again)$/);
  assert.equal(await page.textContent('#admin-routes li[data-id="chat"] .qualify'), 'Qualify');
  // (The dev stack's agent manages arc and xtx: asking would really qualify chat, holding
  // the device the next tests chat on, so Qualify is only pressed where nothing can run.)
  if (!(await page.$(`#admin-devices li[data-device="${input.device}"]`))) {
    // No agent manages the chat route's device: nothing can qualify it, and Qualify says so.
    assert.equal(verdict, 'never qualified');
    await page.click('#admin-routes li[data-id="chat"] .qualify');
    await page.waitForSelector('#admin-routes li[data-id="chat"] .qual-request.error');
    assert.match(await page.textContent('#admin-routes li[data-id="chat"] .qual-request'),
      new RegExp(`^No agent manages device ${input.device} \\(it has never reported status\\), so nothing can qualify route chat on it$`));
    assert.equal(await page.isDisabled('#admin-routes li[data-id="chat"] .qualify'), false, 'it may be asked again');
  }

  await shot(page, 'admin-1280x720');
  // Back to the chat.
  await page.click('#admin-toggle');
  assert.equal(await page.isVisible('#composer'), true);
  assert.deepEqual(page.errors, []);
});
