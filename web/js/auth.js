// Sign-in and sign-out (accounts are made by redeeming an invitation, see main.js) with the official Appwrite Web SDK (window.Appwrite). The
// short-lived JWT lives only in memory and is refreshed through the session; it is never
// written to localStorage, a URL or a run.
export class Auth {
  constructor(cfg, sdk = globalThis.Appwrite) {
    this.sdk = sdk;
    this.client = new sdk.Client().setEndpoint(cfg.endpoint).setProject(cfg.project);
    this.account = new sdk.Account(this.client);
    this.jwt = null;
    this.jwtAt = 0;
    this.user = null;
  }

  async current() {
    try {
      this.user = await this.account.get();
    } catch {
      this.user = null;
    }
    return this.user;
  }

  async signIn(email, password) {
    await this.account.createEmailPasswordSession({ email, password });
    this.jwt = null;
    return this.current();
  }

  async signOut() {
    this.jwt = null;
    try { await this.account.deleteSession({ sessionId: 'current' }); } catch { /* already gone */ }
    this.user = null;
  }

  /** A JWT for API calls; refreshed every 10 minutes (they last 15) or when forced. */
  async token(force = false) {
    if (!force && this.jwt && Date.now() - this.jwtAt < 10 * 60 * 1000) return this.jwt;
    const r = await this.account.createJWT();
    this.jwt = r.jwt;
    this.jwtAt = Date.now();
    return this.jwt;
  }
}
