// Export of a conversation (issue 34) as Markdown and JSON, from the records the owner
// reads: the branch on screen, each answer, each run's status and the files it made.
// Nothing is rendered: the Markdown is the text as written (model output included).

/** exportJSON: a self-describing document of the conversation as shown. */
export function exportJSON({ conversation, turns, exportedAt = new Date().toISOString() }) {
  return {
    format: 'private-assistant.conversation.v1',
    exportedAt,
    conversation: { id: conversation.id, title: conversation.title, createdAt: conversation.createdAt || null },
    messages: turns.flatMap((t) => {
      const out = [{ id: t.user.id, role: 'user', sequence: t.user.sequence, text: t.user.text, createdAt: t.user.createdAt || null,
        attachments: t.user.attachments || [], versions: t.versions || 1 }];
      if (t.run) {
        out.push({ role: 'assistant', runId: t.run.id, kind: t.run.role, status: t.run.status, text: t.answer ?? null,
          error: t.run.error || null, artifacts: (t.artifacts || []).map((a) => ({ id: a.id, filename: a.filename, size: a.size, mimeType: a.mimeType || null })) });
      }
      return out;
    }),
  };
}

/** exportMarkdown: the same as readable Markdown. User text is quoted verbatim. */
export function exportMarkdown(doc) {
  const lines = [`# ${doc.conversation.title}`, '', `Exported ${doc.exportedAt} from Private Assistant.`, ''];
  for (const m of doc.messages) {
    if (m.role === 'user') {
      lines.push('## You', '');
      lines.push(...String(m.text).split('\n').map((l) => '> ' + l), '');
      if (m.attachments.length) lines.push(`Attached: ${m.attachments.length} file(s)`, '');
    } else {
      lines.push(`## Assistant (${m.kind}, ${m.status})`, '');
      if (m.text) lines.push(m.text, '');
      else if (m.error) lines.push(`_${m.error}_`, '');
      if (m.artifacts.length) {
        lines.push('Files:', ...m.artifacts.map((a) => `- ${a.filename} (${a.size} bytes)`), '');
      }
    }
  }
  return lines.join('\n');
}

/** fileName: a safe download name from a title. */
export function fileName(title, ext) {
  const base = String(title || 'conversation').replace(/[^\p{L}\p{N}._ -]+/gu, '').trim().replace(/\s+/g, '-').slice(0, 60) || 'conversation';
  return `${base}.${ext}`;
}
