// Issue 12: the web makes a JWT only when it needs one — shortly before the one it holds
// expires, or once when the API refused it — never one per call, and concurrent callers
// share one createJWT (Appwrite limits createJWT to 120 per 60 s per user).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Auth, Unreachable, lifetimeMs } from '../../js/auth.js';
import { ApiClient } from '../../js/api.js';

const b64 = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');
const jwtOf = (n, life) => `${b64({ alg: 'HS256' })}.${b64({ n, iat: 1000, exp: 1000 + life })}.sig`;

function fakeSdk(life = 900) {
  const made = [];
  class Client { setEndpoint() { return this; } setProject() { return this; } }
  class Account {
    async createJWT(params) {
      made.push(params);
      await new Promise((r) => setTimeout(r, 5));
      return { jwt: jwtOf(made.length, life) };
    }
  }
  return { sdk: { Client, Account }, made };
}

function clock(t0 = 1_000_000) {
  const real = Date.now;
  let now = t0;
  Date.now = () => now;
  return { advance: (ms) => { now += ms; }, restore: () => { Date.now = real; } };
}

test('a JWT is reused until shortly before it expires, and concurrent callers share one createJWT', async () => {
  const c = clock();
  try {
    const { sdk, made } = fakeSdk(900);
    const auth = new Auth({ endpoint: 'http://x/v1', project: 'p' }, sdk);
    const toks = await Promise.all(Array.from({ length: 10 }, () => auth.token()));
    assert.equal(made.length, 1, 'ten callers at once: one createJWT');
    assert.equal(new Set(toks).size, 1);
    c.advance(13 * 60 * 1000);
    await auth.token();
    assert.equal(made.length, 1, 'still valid for two minutes: reused');
    c.advance(60 * 1000 + 1); // within the last minute
    const t2 = await auth.token();
    assert.equal(made.length, 2, 'renewed shortly before expiry');
    assert.notEqual(t2, toks[0]);
    // Ten hours of calls every 10 s use one token per 14 minutes, never one per call.
    for (let i = 0; i < 3600; i++) { c.advance(10 * 1000); await auth.token(); }
    assert.ok(made.length <= 2 + Math.ceil(36000 / (14 * 60)), `${made.length} tokens in ten hours`);
    assert.equal(lifetimeMs(toks[0]), 900 * 1000);
  } finally { c.restore(); }
});

test('ten requests refused at once (401) make one new JWT, and each retries once with it', async () => {
  const { sdk, made } = fakeSdk(900);
  const auth = new Auth({ endpoint: 'http://x/v1', project: 'p' }, sdk);
  const first = await auth.token();
  const seen = [];
  const fetchImpl = async (url, init) => {
    const tok = init.headers.Authorization.slice(7);
    seen.push(tok);
    const ok = tok !== first;
    return new Response(JSON.stringify(ok ? { ok: true } : { error: { code: 'unauthenticated', message: 'expired' } }),
      { status: ok ? 200 : 401, headers: { 'Content-Type': 'application/json' } });
  };
  const api = new ApiClient({ getToken: (force, refused) => auth.token(force, refused), fetchImpl });
  const res = await Promise.all(Array.from({ length: 10 }, () => api.system()));
  assert.equal(res.length, 10);
  assert.equal(made.length, 2, 'the first token and one replacement');
  assert.equal(seen.length, 20, 'each request once with the refused token, once with the new one');
  // A late 401 for the token already replaced does not mint another.
  await auth.token(true, first);
  assert.equal(made.length, 2);
});

test('a short-lived JWT is asked for when configured (tests) and renewed at a third of its life', async () => {
  const c = clock();
  try {
    const { sdk, made } = fakeSdk(6);
    const auth = new Auth({ endpoint: 'http://x/v1', project: 'p', jwtSeconds: 6 }, sdk);
    await auth.token();
    assert.deepEqual(made[0], { duration: 6 });
    c.advance(3900);
    await auth.token();
    assert.equal(made.length, 1);
    c.advance(200);
    await auth.token();
    assert.equal(made.length, 2);
  } finally { c.restore(); }
});

test('a server that cannot be reached is not a sign-out: only a 401 clears the signed-in hint', async () => {
  const store = new Map();
  const real = globalThis.localStorage;
  globalThis.localStorage = { getItem: (k) => (store.has(k) ? store.get(k) : null), setItem: (k, v) => store.set(k, String(v)) };
  try {
    let answer;
    class Client { setEndpoint() { return this; } setProject() { return this; } }
    class Account { async get() { return answer(); } }
    const auth = new Auth({ endpoint: 'http://x/v1', project: 'p' }, { Client, Account });
    store.set('pa-signed-in', '1');
    // Offline: the SDK's fetch failed (AppwriteException code 0).
    answer = () => { throw Object.assign(new Error('Failed to fetch'), { code: 0 }); };
    await assert.rejects(auth.current(), Unreachable);
    assert.equal(store.get('pa-signed-in'), '1', 'still signed in as far as this browser knows');
    // Back: the session is there.
    answer = () => ({ $id: 'u1' });
    assert.deepEqual(await auth.current(), { $id: 'u1' });
    // Appwrite says there is no session: signed out, and not asked again on the next load.
    answer = () => { throw Object.assign(new Error('unauthorized'), { code: 401 }); };
    assert.equal(await auth.current(), null);
    assert.equal(store.get('pa-signed-in'), '0');
    answer = () => { throw new Error('asked'); };
    assert.equal(await auth.current(), null, 'no hint: Appwrite is not asked');
  } finally { globalThis.localStorage = real; }
});
