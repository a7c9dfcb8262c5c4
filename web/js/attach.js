// Files attached to a message (issue 17): picked with the Attach button, dropped on the
// composer or pasted into the draft. Each is uploaded at once with the user's own Appwrite
// session (the official Web SDK) to the uploads bucket, readable by the user alone, and
// the message carries the file ids. These limits mirror schema/uploads.go so a user hears
// about a file that will not fit before it uploads; the bucket and admission enforce them
// again (the server is authoritative).

export const BUCKET = 'uploads';
export const LIMITS = {
  maxFiles: 5,               // schema.MaxAttachments
  maxBytes: 10 * 1024 * 1024, // schema.MaxUploadBytes
  maxTotal: 25 * 1024 * 1024, // schema.MaxAttachmentBytes
  // schema.UploadExtensions
  extensions: ['txt', 'md', 'markdown', 'csv', 'tsv', 'json', 'jsonl', 'yaml', 'yml', 'toml', 'xml', 'html', 'htm', 'log',
    'py', 'go', 'js', 'ts', 'java', 'c', 'h', 'cpp', 'rs', 'rb', 'sh', 'sql', 'css',
    'pdf', 'png', 'jpg', 'jpeg', 'gif', 'webp'],
};

export function fmtBytes(n) {
  if (n >= 1 << 20) return (n / (1 << 20)).toFixed(1) + ' MiB';
  if (n >= 1024) return Math.round(n / 1024) + ' KiB';
  return n + ' B';
}

function ext(name) {
  const i = name.lastIndexOf('.');
  return i > 0 ? name.slice(i + 1).toLowerCase() : '';
}

/**
 * checkFiles decides which of `files` may join the `held` ones ({name, size} each), in
 * order, and says why each other one may not (plain sentences naming the file).
 */
export function checkFiles(held, files, limits = LIMITS) {
  const accepted = [];
  const errors = [];
  let count = held.length;
  let total = held.reduce((s, f) => s + f.size, 0);
  for (const f of files) {
    const name = f.name || 'pasted file';
    if (!limits.extensions.includes(ext(name))) {
      errors.push(`${name}: this type of file cannot be attached (text, data, code, PDF or images only).`);
    } else if (f.size === 0) {
      errors.push(`${name} is empty.`);
    } else if (f.size > limits.maxBytes) {
      errors.push(`${name} is ${fmtBytes(f.size)}; a file may be at most ${fmtBytes(limits.maxBytes)}.`);
    } else if (count >= limits.maxFiles) {
      errors.push(`${name}: a message carries at most ${limits.maxFiles} files.`);
    } else if (total + f.size > limits.maxTotal) {
      errors.push(`${name}: the files of one message may add up to ${fmtBytes(limits.maxTotal)} at most.`);
    } else {
      accepted.push(f);
      count++;
      total += f.size;
    }
  }
  return { accepted, errors };
}

/** Pasted images have generic names ("image.png"); give them a distinct one. */
function named(f, i) {
  if (f.name && f.name !== 'image.png') return f;
  const stamp = new Date().toISOString().replace(/[:.]/g, '-').slice(0, 19);
  try { return new File([f], `pasted-${stamp}-${i + 1}.${ext(f.name || '') || 'png'}`, { type: f.type }); } catch { return f; }
}

/**
 * Attachments is the composer's list of files. `list` is the <ul> the chips go in; `say`
 * announces a sentence (the composer's polite live region); `userId` names the signed-in
 * user, whose read is the file's only permission.
 */
export class Attachments {
  constructor({ sdk, client, userId, list, say }) {
    this.sdk = sdk;
    this.storage = client ? new sdk.Storage(client) : null;
    this.userId = userId;
    this.list = list;
    this.say = say;
    this.items = []; // { key, file, name, size, id, state: uploading|ready|failed, progress, promise, li }
    this.seq = 0;
    this.names = new Map(); // file id → Promise<{name, size}>
    this.lastBad = false;
  }

  tell(text, bad = false) {
    this.lastBad = bad;
    this.say(text, bad);
  }

  get count() { return this.items.length; }

  add(fileList) {
    const files = [...fileList].map(named);
    if (!files.length) return;
    const { accepted, errors } = checkFiles(this.items, files);
    for (const f of accepted) this.upload(f);
    const words = [];
    if (accepted.length) words.push(accepted.length === 1 ? `${accepted[0].name} attached, uploading.` : `${accepted.length} files attached, uploading.`);
    words.push(...errors);
    this.tell(words.join(' '), errors.length > 0);
  }

  upload(file) {
    const item = { key: ++this.seq, file, name: file.name, size: file.size, id: null, state: 'uploading', progress: 0 };
    this.items.push(item);
    item.li = this.chip(item);
    this.list.append(item.li);
    this.list.hidden = false;
    const uid = this.userId();
    item.promise = (async () => {
      try {
        if (!this.storage || !uid) throw new Error('not signed in');
        const r = await this.storage.createFile({
          bucketId: BUCKET, fileId: this.sdk.ID.unique(), file,
          // The owner reads it and may delete it (schema.UploadPermissions); nobody else.
          permissions: [this.sdk.Permission.read(this.sdk.Role.user(uid)), this.sdk.Permission.delete(this.sdk.Role.user(uid))],
          onProgress: (p) => { item.progress = Math.round(p.progress || 0); this.draw(item); },
        });
        item.id = r.$id;
        item.state = 'ready';
        this.names.set(r.$id, Promise.resolve({ name: item.name, size: item.size }));
      } catch (e) {
        item.state = 'failed';
        item.error = uploadError(e);
        if (this.items.includes(item)) this.tell(`${item.name} could not be uploaded: ${item.error}`, true);
      }
      this.draw(item);
      // The last upload done: say so, unless a refusal is still the latest word.
      if (this.items.includes(item) && !this.busy() && !this.lastBad && this.items.every((x) => x.state === 'ready')) {
        const n = this.items.length;
        this.tell(n === 1 ? `${this.items[0].name} is ready to send.` : `${n} files are ready to send.`);
      }
    })();
  }

  chip(item) {
    const name = document.createElement('span');
    name.className = 'name';
    name.textContent = item.name;
    const meta = document.createElement('span');
    meta.className = 'meta';
    const rm = document.createElement('button');
    rm.type = 'button';
    rm.className = 'remove';
    rm.setAttribute('aria-label', `Remove ${item.name}`);
    rm.textContent = '×';
    rm.addEventListener('click', () => this.remove(item.key));
    const li = document.createElement('li');
    li.className = 'chip';
    li.append(name, meta, rm);
    item.meta = meta;
    this.draw(item, li);
    return li;
  }

  draw(item, li = item.li) {
    if (!li) return;
    li.dataset.state = item.state;
    const words = item.state === 'uploading' ? `${fmtBytes(item.size)} · uploading${item.progress ? ' ' + item.progress + '%' : '…'}`
      : item.state === 'failed' ? `${fmtBytes(item.size)} · not uploaded` : fmtBytes(item.size);
    if (item.meta.textContent !== words) item.meta.textContent = words;
    li.title = item.state === 'failed' ? item.error : '';
  }

  remove(key) {
    const i = this.items.findIndex((x) => x.key === key);
    if (i < 0) return;
    const [item] = this.items.splice(i, 1);
    const next = this.items[i]?.li || this.items[i - 1]?.li;
    item.li.remove();
    this.list.hidden = this.items.length === 0;
    this.tell(`${item.name} removed.`);
    (next?.querySelector('button.remove') || document.getElementById('attach'))?.focus();
    // A removed file is deleted from the bucket (once its upload is done); a failure only
    // leaves an unused private file behind.
    item.promise.then(() => {
      if (item.id && this.storage) this.storage.deleteFile({ bucketId: BUCKET, fileId: item.id }).catch(() => {});
    });
  }

  busy() { return this.items.some((x) => x.state === 'uploading'); }

  /** ready waits for every upload and returns [{id, name, size}], or throws naming the failures. */
  async ready() {
    await Promise.all(this.items.map((x) => x.promise));
    const failed = this.items.filter((x) => x.state !== 'ready');
    if (failed.length) {
      throw new Error(`${failed.map((x) => x.name).join(', ')} could not be uploaded; remove ${failed.length === 1 ? 'it' : 'them'} or attach again.`);
    }
    return this.items.map((x) => ({ id: x.id, name: x.name, size: x.size }));
  }

  clear() {
    this.items = [];
    this.list.replaceChildren();
    this.list.hidden = true;
  }

  /** describe resolves a stored attachment's name and size (read with the user's own session). */
  describe(id) {
    if (!this.names.has(id)) {
      const p = this.storage ? this.storage.getFile({ bucketId: BUCKET, fileId: id }).then((f) => ({ name: f.name, size: f.sizeOriginal }))
        : Promise.reject(new Error('no storage'));
      this.names.set(id, p.catch(() => ({ name: 'a file no longer available', size: 0 })));
    }
    return this.names.get(id);
  }
}

/** clipIcon is a paper clip drawn in the current text colour (decorative). */
export function clipIcon(size = 16) {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  for (const [k, v] of Object.entries({ viewBox: '0 0 24 24', width: size, height: size, 'aria-hidden': 'true', focusable: 'false', class: 'clip' })) svg.setAttribute(k, v);
  const p = document.createElementNS(ns, 'path');
  for (const [k, v] of Object.entries({ d: 'M21 11.5l-8.5 8.5a5 5 0 0 1-7-7L14 4.5a3.5 3.5 0 0 1 5 5L10.5 18a2 2 0 0 1-3-3L15 7.5',
    fill: 'none', stroke: 'currentColor', 'stroke-width': '2', 'stroke-linecap': 'round', 'stroke-linejoin': 'round' })) p.setAttribute(k, v);
  svg.append(p);
  return svg;
}

function uploadError(e) {
  const t = e?.type || '';
  if (t === 'storage_file_type_unsupported') return 'this type of file cannot be attached.';
  if (t === 'storage_invalid_file_size') return 'the file is too large.';
  if (e?.code === 401) return 'you may not upload files (is your account admitted?).';
  if (e?.message && /fetch|network/i.test(e.message)) return 'the server could not be reached.';
  return (e?.message || 'unknown error').replace(/\.$/, '') + '.';
}
