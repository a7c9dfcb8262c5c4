// The admin console's wording of a route's GPU qualification (issue 20): the verdict line,
// a request's progress, and the measured figures of the last result.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { qualificationVerdict, requestActive, requestLine, qualificationFigures } from '../../js/admin.js';

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
