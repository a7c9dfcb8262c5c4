import { test } from 'node:test';
import assert from 'node:assert/strict';
import { applyEvents, newRunState } from '../../js/follow.js';
import { statusLine, usageWords } from '../../js/view.js';

const ev = (sequence, type, data = {}) => ({ sequence, type, data });

test('usageWords says the tokens and the model served, as text', () => {
  assert.equal(usageWords({ inputTokens: 2500, outputTokens: 200, totalTokens: 2700, model: 'qwen3-30b-a3b-q8' }),
    '2,700 tokens · model qwen3-30b-a3b-q8');
  assert.equal(usageWords({ totalTokens: 1, model: null }), '1 token');
  assert.equal(usageWords({ inputTokens: 10, outputTokens: 2, totalTokens: 0 }), '12 tokens');
  assert.equal(usageWords({ totalTokens: 0, model: 'm' }), 'model m');
  assert.equal(usageWords({ totalTokens: 1234567 }), '1,234,567 tokens');
  assert.equal(usageWords(null), '');
  assert.equal(usageWords({}), '');
});

test('a settled run card shows "N tokens · model X" from the run record', () => {
  const s = newRunState({ id: 'r', status: 'completed', role: 'research',
    usage: { inputTokens: 2500, outputTokens: 200, totalTokens: 2700, model: 'qwen3-30b-a3b-q8', requests: 2 } });
  const l = statusLine(s);
  assert.equal(l.label, 'done');
  assert.equal(l.detail, '2,700 tokens · model qwen3-30b-a3b-q8');
});

test('a running card shows no usage; the terminal event brings the tokens, the record the model', () => {
  const s = newRunState({ id: 'r', status: 'running', role: 'coding', startedAt: new Date().toISOString() });
  assert.doesNotMatch(statusLine(s).detail, /token/);
  applyEvents(s, [ev(1, 'message.delta', { text: 'hi' }), ev(2, 'run.completed', { usage: { inputTokens: 5, outputTokens: 2, totalTokens: 7 } })]);
  assert.equal(statusLine(s).detail, '7 tokens');
  // What main.js does once the follower ends: the record's usage carries the model.
  s.usage = { inputTokens: 5, outputTokens: 2, totalTokens: 7, model: 'm-served' };
  assert.equal(statusLine(s).detail, '7 tokens · model m-served');
  // A failed run that used the model says so too, next to nothing else.
  const f = newRunState({ id: 'f', status: 'failed', role: 'chat', usage: { totalTokens: 12, model: 'm' } });
  assert.equal(statusLine(f).detail, '12 tokens · model m');
});
