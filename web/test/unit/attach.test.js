import { test } from 'node:test';
import assert from 'node:assert/strict';
import { checkFiles, fmtBytes, LIMITS } from '../../js/attach.js';

const f = (name, size) => ({ name, size });

test('checkFiles keeps what fits, in order, and names each refusal in a sentence', () => {
  const { accepted, errors } = checkFiles([f('held.txt', 100)], [
    f('ok.md', 10), f('run.exe', 10), f('noext', 10), f('empty.txt', 0), f('big.csv', LIMITS.maxBytes + 1), f('IMAGE.PNG', 5)]);
  assert.deepEqual(accepted.map((x) => x.name), ['ok.md', 'IMAGE.PNG']);
  assert.deepEqual(errors, [
    'run.exe: this type of file cannot be attached (text, data, code, PDF or images only).',
    'noext: this type of file cannot be attached (text, data, code, PDF or images only).',
    'empty.txt is empty.',
    'big.csv is 10.0 MiB; a file may be at most 10.0 MiB.',
  ]);
});

test('checkFiles bounds the count and the total of one message', () => {
  const five = checkFiles([], [1, 2, 3, 4, 5, 6].map((i) => f(`f${i}.txt`, 1)));
  assert.equal(five.accepted.length, LIMITS.maxFiles);
  assert.deepEqual(five.errors, ['f6.txt: a message carries at most 5 files.']);
  const nine = 9 * 1024 * 1024;
  const total = checkFiles([f('a.txt', nine), f('b.txt', nine)], [f('c.txt', nine), f('d.txt', 1)]);
  assert.deepEqual(total.accepted.map((x) => x.name), ['d.txt']);
  assert.deepEqual(total.errors, ['c.txt: the files of one message may add up to 25.0 MiB at most.']);
});

test('sizes read as people read them', () => {
  assert.equal(fmtBytes(512), '512 B');
  assert.equal(fmtBytes(2048), '2 KiB');
  assert.equal(fmtBytes(3 * 1024 * 1024), '3.0 MiB');
});
