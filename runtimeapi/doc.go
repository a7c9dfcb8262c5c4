// Package runtimeapi is the domain half of the runtime API (issue 19 item 2): the keys an
// admin issues to host applications, the users those applications act for, the per-key
// rate limit and the audit of every use. The HTTP half is functions/service/responses.go.
//
// # Keys
//
// A key is shown once, at creation: "pak_<keyId>_<secret>", where keyId is "rk" and 16
// hex digits (the record's id, so a lookup is one read by id) and secret is 32 random
// bytes in base64url. The record keeps only the hex SHA-256 of the whole string. A fast
// hash is enough because the secret has 256 bits of entropy: there is no dictionary to
// try, so a slow password hash (bcrypt, argon2) would only cost every call tens of
// milliseconds without making a leaked hash any easier to keep. The stored hash is
// compared in constant time. Revocation sets revokedAt on the record, and every call
// reads the record, so a revoked key is refused from the next call on (no cache).
//
// # App users
//
// The host app names its user with a stable identifier from its own auth (X-App-User).
// (appId, that identifier) maps to an Appwrite user whose id is derived from both
// (AppUserID) and which carries the label AppLabel(appId) and no other: it is not a member,
// cannot sign in (no email, no password) and owns only what the app made for it. It is
// never an existing member unless an admin links the pair to one (a runtime link); a
// derived id that exists without the app's label is refused, never adopted.
//
// # Scope
//
// A key acts only for its app's users and only with its roles. Every response id is
// checked against the caller: the run must be owned by the resolved user AND have been
// admitted through this app (its request id starts with RequestIDPrefix(appId)); anything
// else reads exactly like a missing response.
package runtimeapi
