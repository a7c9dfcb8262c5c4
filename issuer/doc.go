// Package issuer is the project's token issuer and the JWT checks that host apps and the
// runtime API share (issue 35 items 1–2).
//
// The project signs with ES256 keys it makes and rotates itself (Keyring, in the queue
// Redis: the private keys readable by the agents only, the public set published by the
// functions at GET /api/v1/jwks). A key signs for Rotate (30 days), then the next one
// does; the old one stays in the public set for Overlap (1 hour), longer than any token
// it signed lives (apptools.TokenLifetime, 5 minutes) plus clock skew.
//
// Verify is the one JWT check: the signature with the key the token's kid names (ES256,
// RS256 or EdDSA only: never "none" or an HMAC), iss and aud exactly, exp required and
// not passed, nbf and iat not in the future, each within the leeway (60 s), and a
// lifetime bound. Fetcher reads a JWKS URL and keeps it: an unknown kid re-reads it at
// most every 30 s (a rotation at the source is picked up; a flood of made-up kids costs
// one fetch per 30 s).
//
// Tests: TestKeyringRotatesWithOverlap, TestConcurrentEnsureMakesOneKey,
// TestVerifyRefuses, TestFetcherFollowsRotation.
package issuer
