// Sign-in and sign-out (accounts are made by redeeming an invitation, see main.js) with the official Appwrite Web SDK (window.Appwrite). The
// short-lived JWT lives only in memory and is refreshed through the session; it is never
// written to localStorage, a URL or a run.
/** Unreachable: Appwrite could not be asked whether this browser is signed in. */
export class Unreachable extends Error {}

export class Auth {
  constructor(cfg, sdk = globalThis.Appwrite) {
    this.sdk = sdk;
    this.client = new sdk.Client().setEndpoint(cfg.endpoint).setProject(cfg.project);
    this.account = new sdk.Account(this.client);
    this.jwt = null;
    this.jwtAt = 0;
    this.refreshAt = 0;
    this.minting = null;
    // jwtSeconds asks Appwrite for shorter tokens (tests); unset, Appwrite's default (15 min).
    this.jwtSeconds = cfg.jwtSeconds || 0;
    this.user = null;
  }

  /**
   * current reads the signed-in account. A browser that never signed in here (no hint in
   * localStorage) is not asked: Appwrite would answer 401, which every browser logs as an
   * error on a normal first load. The hint is only a hint: the session is Appwrite's.
   */
  async current() {
    if (!hint()) { this.user = null; return null; }
    try {
      this.user = await this.account.get();
    } catch (e) {
      this.user = null;
      // Only Appwrite saying "no session" (401) signs this browser out. A server that
      // cannot be reached (offline, a restart) says nothing about the session: the hint
      // stays and the caller learns it could not tell (Unreachable).
      if (e?.code !== 401) throw new Unreachable(e?.message || String(e));
      hint(false);
    }
    return this.user;
  }

  async signIn(email, password) {
    await this.account.createEmailPasswordSession({ email, password });
    hint(true);
    this.jwt = null;
    return this.current();
  }

  async signOut() {
    this.jwt = null;
    hint(false);
    try { await this.account.deleteSession({ sessionId: 'current' }); } catch { /* already gone */ }
    this.user = null;
  }

  /**
   * A JWT for API calls. Appwrite's JWTs last 15 minutes and createJWT is rate-limited per
   * user (120 per 60 s), so a token is made only when needed: shortly before the one held
   * expires (its own lifetime, exp − iat, counted on this clock, so a skewed clock does not
   * matter), or when the API refused the token the caller sent (`failed`). Concurrent
   * callers share one createJWT.
   */
  async token(force = false, failed = null) {
    if (this.minting) return this.minting;
    const fresh = this.jwt && Date.now() < this.refreshAt;
    // A refusal of a token already replaced: the new one is the answer.
    if (fresh && (!force || (failed && failed !== this.jwt))) return this.jwt;
    this.minting = (async () => {
      try {
        const r = await this.account.createJWT(this.jwtSeconds ? { duration: this.jwtSeconds } : undefined);
        this.jwt = r.jwt;
        this.jwtAt = Date.now();
        this.jwtMade = (this.jwtMade || 0) + 1;
        const life = lifetimeMs(r.jwt) || 15 * 60 * 1000;
        // Refresh with a margin: a minute for the usual 15 minutes, a third of shorter ones.
        this.refreshAt = this.jwtAt + life - Math.min(60 * 1000, life / 3);
        return this.jwt;
      } finally {
        this.minting = null;
      }
    })();
    return this.minting;
  }
}

/** hint reads (no argument) or sets whether this browser has signed in here. */
function hint(set) {
  try {
    // A session from before the hint existed shows in the SDK's cookie fallback (when it
    // keeps one); otherwise such a browser signs in once more.
    if (set === undefined) {
      const h = globalThis.localStorage?.getItem('pa-signed-in');
      return h === '1' || (h == null && /a_session_/.test(globalThis.localStorage?.getItem('cookieFallback') || ''));
    }
    globalThis.localStorage?.setItem('pa-signed-in', set ? '1' : '0');
  } catch { /* storage refused: ask Appwrite every time */ return set === undefined; }
  return set;
}

/** lifetimeMs reads exp − iat from a JWT's payload (0 when it cannot be read). */
export function lifetimeMs(jwt) {
  try {
    const part = String(jwt).split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    const c = JSON.parse(atob(part + '='.repeat((4 - (part.length % 4)) % 4)));
    return c.exp && c.iat && c.exp > c.iat ? (c.exp - c.iat) * 1000 : 0;
  } catch {
    return 0;
  }
}
