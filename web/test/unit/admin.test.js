// The admin console's wording of a route's GPU qualification (issue 20): the verdict line,
// a request's progress, and the measured figures of the last result.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { qualificationVerdict, requestActive, requestLine, qualificationFigures, auditWords, formErrors, HARNESS_FORM, ROUTE_FORM, releaseState, releaseChanges, evidenceLines, readinessLines } from '../../js/admin.js';

const MiB = 1048576;
const passed = {
  route: 'chat', routeRevision: 3, device: 'gpu0', model: 'qwen3-32b', contextBudget: 32768, startedAt: '2026-11-30T10:00:00Z',
  finishedAt: '2026-11-30T10:04:05.123456789Z', waitedSeconds: 12, passed: true, contextServed: 32768, contextTrained: 40960,
  contextSource: 'llama-server /props', filledTokens: 32000, concurrency: 2, vramIdleBytes: 18000 * MiB, vramFullBytes: 22000 * MiB,
  vramAfterBytes: 18010 * MiB, vramTotalBytes: 24560 * MiB, promptTokensPerSecond: 812.44, generationTokensPerSecond: 31.26,
  concurrentTokensPerSecond: 50.5, limits: { maxTemperatureC: 95, minFreeMemoryBytes: 512 * MiB, minGenerationTokensPerSecond: 5 },
};
const view = (last, extra = {}) => ({ route: 'chat', revision: 4, device: 'gpu0', model: 'qwen3-32b', contextBudget: 32768,
  qualified: !!last?.passed, summary: 'x', last, request: null, ...extra });

test('verdict: passed with its date, failed with its first reason, never, for another model or budget', () => {
  assert.deepEqual(qualificationVerdict(view(passed)), { state: 'passed', text: '✓ passed 2026-11-30 10:04 UTC' });
  const failed = { ...passed, passed: false, reasons: ['peak temperature 101 °C is above the limit of 95 °C', 'memory did not come back'] };
  const f = qualificationVerdict(view(failed, { reason: 'route chat revision 4 failed its qualification' }));
  assert.equal(f.state, 'failed');
  assert.match(f.text, /^✗ failed 2026-11-30 10:04 UTC: peak temperature 101 °C is above the limit of 95 °C$/);
  assert.deepEqual(qualificationVerdict(view(null, { summary: 'never qualified' })), { state: 'never', text: 'never qualified' });
  assert.deepEqual(qualificationVerdict({}), { state: 'never', text: 'never qualified' });
  for (const changed of [{ model: 'other' }, { contextBudget: 65536 }, { device: 'gpu1' }]) {
    assert.deepEqual(qualificationVerdict(view(passed, { ...changed, qualified: false })),
      { state: 'stale', text: 'for another model or budget — qualify again' }, JSON.stringify(changed));
  }
  // A member's /api/system has no figures: the server's summary stands.
  assert.deepEqual(qualificationVerdict({ route: 'chat', qualified: false, summary: 'failed: too hot', last: null }), { state: 'unknown', text: 'failed: too hot' });
});

test('request progress: queued, waiting or running with position and reason; finished ones are not active', () => {
  assert.equal(requestActive(null), false);
  assert.equal(requestLine(null), '');
  const q = { state: 'waiting', position: '2', reason: 'a user job holds gpu0' };
  assert.equal(requestActive(q), true);
  assert.equal(requestLine(q), 'Qualification waiting (position 2): a user job holds gpu0');
  assert.equal(requestLine({ state: 'running', reason: 'filling the KV cache' }), 'Qualification running: filling the KV cache');
  assert.equal(requestLine({ state: 'running', step: 'fill', reason: 'filled 3,900 of 4,000 tokens at 1,200 tokens/s' }),
    'Qualification running (step 2 of 5, fill): filled 3,900 of 4,000 tokens at 1,200 tokens/s');
  assert.equal(requestLine({ state: 'error', step: '', reason: 'the agent restarted during this qualification; nothing was recorded; ask again' }),
    'Last request error: the agent restarted during this qualification; nothing was recorded; ask again');
  for (const state of ['passed', 'failed', 'error']) assert.equal(requestActive({ state }), false, state);
  assert.equal(requestLine({ state: 'error', reason: 'model did not load' }), 'Last request error: model did not load');
});

test('figures: context, VRAM in MiB, speeds, concurrency, limits; peak °C and W only when reported', () => {
  const rows = Object.fromEntries(qualificationFigures(passed));
  assert.equal(rows['Context served / trained'], '32,768 / 40,960 tokens (llama-server /props)');
  assert.equal(rows['VRAM idle / full / after / total'], '18,000 MiB / 22,000 MiB / 18,010 MiB / 24,560 MiB');
  assert.equal(rows['Prompt / generation'], '812.4 / 31.3 tokens/s');
  assert.equal(rows['Concurrent'], '2 requests, 50.5 tokens/s together');
  assert.equal(rows['Limits'], '≤ 95 °C, ≥ 512 MiB free, generation ≥ 5.0 tokens/s');
  assert.equal(rows['Waited for the device'], '12 s');
  assert.ok(!('Peak temperature' in rows) && !('Peak power' in rows), 'hidden when 0 (not reported)');
  assert.ok(!('Reasons' in rows), 'a pass has no reasons');
  const hot = Object.fromEntries(qualificationFigures({ ...passed, passed: false, reasons: ['too hot'], peakTemperatureC: 101.4, peakPowerW: 320, contextTrained: 0 }));
  assert.equal(hot['Peak temperature'], '101 °C');
  assert.equal(hot['Peak power'], '320 W');
  assert.equal(hot['Reasons'], 'too hot');
  assert.equal(hot['Context served / trained'], '32,768 / not reported tokens (llama-server /props)');
  assert.deepEqual(qualificationFigures(null), []);
});

test('auditWords: member actions and changes in plain words, no internal names', () => {
  const names = new Map([['uadmin', 'Ada'], ['ubob', 'bob@example.com']]);
  const w = (a) => auditWords({ target: '', ...a }, names);
  assert.equal(w({ action: 'invitation.create', actorId: 'uadmin', target: 'invitation/i1' }), 'Ada created an invitation.');
  assert.equal(w({ action: 'invitation.revoke', actorId: 'uadmin', target: 'invitation/i1' }), 'Ada revoked an invitation.');
  assert.equal(w({ action: 'invitation.redeem', actorId: 'ubob', target: 'invitation/i1', detail: '{"email":"bob@example.com","name":"Bob"}' }),
    'Bob signed up with an invitation as bob@example.com.');
  assert.equal(w({ action: 'member.admit', actorId: 'uadmin', target: 'member/ubob' }), 'Ada admitted bob@example.com.');
  assert.equal(w({ action: 'member.remove', actorId: 'gone', target: 'member/ubob', detail: '{"email":"b@x"}' }), 'An administrator removed b@x.');
  assert.equal(w({ action: 'member.role', actorId: 'uadmin', target: 'member/ubob', detail: '{"to":"admin"}' }), 'Ada made bob@example.com an administrator.');
  assert.equal(w({ action: 'route.register', actorId: 'uadmin', target: 'route/chat', toRevision: 3 }), 'Ada saved model route chat (version 3).');
  assert.equal(w({ action: 'harness.validate', actorId: 'agent:a1', target: 'harness/hermes/validate/1', toRevision: 2, detail: '{"verified":false,"reason":"key unreadable","keptVerified":true}' }),
    'The agent checked harness hermes (version 2): it failed (key unreadable); the roles using it keep working.');
  assert.equal(w({ action: 'selection.commit', actorId: 'uadmin', target: 'settings/system', toRevision: 4 }), 'Ada changed which harness and route each kind of work uses (version 4).');
  assert.equal(w({ action: 'release.propose', actorId: 'uadmin', target: 'release/5', toRevision: 5 }), 'Ada proposed configuration 5.');
  assert.equal(w({ action: 'release.promote', actorId: 'uadmin', target: 'settings/system', toRevision: 7, detail: '{"release":5}' }), 'Ada made configuration 5 live.');
  assert.equal(w({ action: 'release.rollback', actorId: 'uadmin', target: 'settings/system', toRevision: 8, detail: '{"release":4}' }), 'Ada went back to configuration 4.');
  assert.equal(w({ action: 'release.promote', actorId: 'uadmin', target: 'settings/env-staging', toRevision: 2, detail: '{"release":5,"environment":"staging"}' }), 'Ada made configuration 5 live in staging.');
  assert.equal(w({ action: 'release.follow', actorId: 'uadmin', target: 'settings/env-staging', toRevision: 3, detail: '{"environment":"staging","follows":"production"}' }), 'Ada made staging run what everyone runs again.');
});

test('releases: state, plan and evidence in words, no internal names', () => {
  assert.equal(releaseState({ live: true, state: 'ready' }), 'live');
  assert.equal(releaseState({ state: 'collecting' }), 'being checked');
  assert.equal(releaseState({ state: 'failed' }), 'its checks failed');
  assert.equal(releaseState({ state: 'ready' }), 'checked: ready to go live');
  assert.equal(releaseState({ state: 'ready', promotedAt: '2026-12-07T12:00:00Z' }), 'was live before');
  // Runtime environments (a host app's staging): where each release runs.
  assert.equal(releaseState({ live: true, state: 'ready', liveIn: ['staging'] }), 'live · live in staging');
  assert.equal(releaseState({ state: 'ready', promotedAt: '2026-12-07T12:00:00Z', liveIn: ['staging'] }), 'was live before · live in staging');
  assert.equal(releaseState({ state: 'ready', liveIn: ['staging'] }, 'staging'), 'live in staging');
  assert.equal(releaseState({ live: true, state: 'ready', envs: [] }, 'staging'), 'live (staging runs it too)');
  assert.equal(releaseState({ live: true, state: 'ready', envs: ['staging'] }, 'staging'), 'live for everyone else');
  assert.equal(releaseState({ state: 'ready' }, 'staging'), 'checked: ready to go live');
  const b = (route, tools) => ({ harness: 'direct', harnessRevision: 1, route, routeRevision: 2, tools });
  assert.deepEqual(releaseChanges({ seq: 3, plan: { changes: [
    { field: 'roles.chat', from: b('chat', []), to: b('work', ['web']) },
    { field: 'roles.poetry', from: null, to: b('work', null) },
    { field: 'roles.old', from: b('chat', []), to: null },
    { field: 'toolCeiling', from: ['web'], to: ['web', 'file'] }] } }), [
    'chat: harness direct version 1, model route chat version 2, tools: none → harness direct version 1, model route work version 2, tools: web.',
    'New kind of work poetry: harness direct version 1, model route work version 2, every allowed tool.',
    'old is removed.',
    'Tools allowed at all: web, file.']);
  assert.deepEqual(releaseChanges({ seq: 1 }), ['The first configuration.']);
  assert.deepEqual(evidenceLines(null), ['Not checked yet.']);
  assert.deepEqual(evidenceLines({ passed: false, problems: ['harness h revision 1: its latest check failed (x)'],
    harnesses: [{ id: 'h', revision: 1, verified: true, version: '0.22.2', commit: 'abc' }],
    routes: [{ id: 'work', revision: 2, model: 'm', device: 'xtx', contextBudget: 65536, qualification: 'not needed' }],
    probes: [{ role: 'chat', ok: true, detail: 'hi' }] }), [
    'The checks failed.', 'Problem: harness h revision 1: its latest check failed (x).', 'Harness h version 1: works, Hermes 0.22.2 (abc).',
    'Model route work version 2: m on xtx, 65,536 tokens; GPU qualification: not needed.', 'Test run for chat: answered (hi).']);
});

test('formErrors: each field checked as typed', () => {
  assert.deepEqual(formErrors(HARNESS_FORM, { profileId: 'hermes', kind: 'hermes', baseUrl: 'http://127.0.0.1:8642', keyRef: 'env:HERMES_KEY' }), {});
  const bad = formErrors(HARNESS_FORM, { profileId: 'a b', baseUrl: 'ftp://x', keyRef: 'sk-live-123' });
  assert.deepEqual(Object.keys(bad).sort(), ['baseUrl', 'keyRef', 'profileId']);
  assert.match(bad.keyRef, /never the key itself/);
  assert.deepEqual(formErrors(ROUTE_FORM, { routeId: 'chat', alias: 'chat', device: 'arc', backendModel: 'm', contextBudget: 8192, maxOutput: 0 }), {});
  assert.deepEqual(Object.keys(formErrors(ROUTE_FORM, { routeId: 'chat', alias: '', device: '', backendModel: 'm', contextBudget: 0, maxOutput: -1 })).sort(),
    ['alias', 'contextBudget', 'device', 'maxOutput']);
});

test('readiness in words: the summary, then failing components, then unknown ones; ready says so; none reported', () => {
  const r = {
    ready: false, summary: '1 of 4 components failing. The queue Redis is failing (refused): check it.',
    components: [
      { name: 'appwrite', kind: 'appwrite', state: 'ready', message: 'Appwrite is ready.' },
      { name: 'redis', kind: 'redis', state: 'failing', message: 'The queue Redis is failing (refused): check it.' },
      { name: 'stream', kind: 'stream', state: 'unknown', message: 'The stream service cannot be checked while the queue Redis is failing (x).' },
      { name: 'hermes:member:u1', kind: 'hermes', state: 'idle', message: 'Member u1\'s Hermes is idle (stopped while unused); that is not a failure.' },
    ],
  };
  assert.deepEqual(readinessLines(r), { ready: false, lines: [r.summary,
    { name: 'redis', state: 'failing', text: 'The queue Redis is failing (refused): check it.' },
    { name: 'stream', state: 'unknown', text: 'The stream service cannot be checked while the queue Redis is failing (x).' }] });
  assert.deepEqual(readinessLines({ ready: true, summary: 'All 2 components are ready.', components: [r.components[0], r.components[3]] }),
    { ready: true, lines: ['All 2 components are ready.'] });
  assert.deepEqual(readinessLines(undefined), { ready: null, lines: ['Readiness unknown: this server did not report it.'] });
});
