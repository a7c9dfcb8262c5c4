import { test } from 'node:test';
import assert from 'node:assert/strict';
import { tree, path, versions, parentFor, ROOT } from '../../js/branch.js';
import { exportJSON, exportMarkdown, fileName } from '../../js/export.js';

const u = (id, sequence, parentId) => ({ id, sequence, role: 'user', text: id, parentId });

test('a conversation never branched is one path, in sequence order', () => {
  const t = tree([u('a', 1), { id: 'x', role: 'assistant', sequence: 2 }, u('b', 3), u('c', 4)]);
  assert.deepEqual(path(t).map((m) => m.id), ['a', 'b', 'c']);
  assert.deepEqual(versions(t, 'b'), { index: 1, count: 1, siblings: [t.byId.get('b')] });
});

test('an edit is a sibling; the newest version is shown unless another is chosen', () => {
  const t = tree([u('a', 1), u('b', 3), u('c', 5), u('b2', 7, 'a'), u('d', 9, 'b2'), u('a2', 11, ROOT)]);
  assert.deepEqual(path(t).map((m) => m.id), ['a2']);
  assert.deepEqual(path(t, new Map([['', 'a']])).map((m) => m.id), ['a', 'b2', 'd']);
  assert.deepEqual(path(t, new Map([['', 'a'], ['a', 'b']])).map((m) => m.id), ['a', 'b', 'c']);
  assert.equal(versions(t, 'b2').index, 2);
  assert.equal(versions(t, 'b2').count, 2);
  assert.equal(parentFor(t, 'b'), 'a');
  assert.equal(parentFor(t, 'a'), ROOT);
  // A later message naming no parent follows the previous user message by sequence.
  const t2 = tree([u('a', 1), u('b', 2), u('b2', 3, 'a'), u('cli', 4)]);
  assert.equal(t2.parent.get('cli'), 'b2');
  // A parent that is not an earlier user message is none.
  assert.equal(tree([u('a', 1), u('z', 2, 'nope')]).parent.get('z'), '');
});

test('export: Markdown quotes what was said and lists the files; JSON keeps the records', () => {
  const doc = exportJSON({ conversation: { id: 'c1', title: 'Trip' }, exportedAt: 'T',
    turns: [{ user: { id: 'm1', sequence: 1, text: 'Plan it\n<b>x</b>' }, versions: 2,
      run: { id: 'r1', role: 'research', status: 'completed' }, answer: 'Done ![img](http://x/y.png)', artifacts: [{ id: 'f', filename: 'notes.md', size: 12 }] }] });
  assert.equal(doc.messages.length, 2);
  assert.equal(doc.messages[1].artifacts[0].filename, 'notes.md');
  const md = exportMarkdown(doc);
  assert.match(md, /^# Trip/);
  assert.match(md, /> Plan it\n> <b>x<\/b>/);
  assert.match(md, /## Assistant \(research, completed\)/);
  assert.match(md, /- notes\.md \(12 bytes\)/);
  assert.equal(fileName('Trip to Porto / 2026?', 'md'), 'Trip-to-Porto-2026.md');
  assert.equal(fileName('', 'json'), 'conversation.json');
});
