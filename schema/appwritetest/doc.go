// Package appwritetest is an Appwrite 1.9.6 emulator: the subset of the REST API this
// project calls, with the JSON shapes, status codes and error bodies
// ({message, code, type, version}) of the real server as the official SDKs see them
// (response format 1.8.0, which is what sdk-for-go v1.0.0 and the web SDK request).
//
// It serves one project. Callers are resolved as Appwrite resolves them: a session
// (cookie a_session_<project>, X-Fallback-Cookies, or X-Appwrite-Session), then
// X-Appwrite-JWT; an X-Appwrite-Key replaces whichever user was found and bypasses
// authorization, limited only by its scopes. Guests and users hold Appwrite's role scopes.
//
// Covered: health/version; Account (create, email sessions, get, JWTs, get/delete
// session); Users (create, get, labels, sessions, JWTs); legacy Databases (databases,
// collections, attributes and indexes with the processing → available transition,
// documents CRUD with queries, unique indexes, permissions and documentSecurity,
// X-Appwrite-Timestamp optimistic concurrency); Storage (buckets, single and chunked
// uploads, get, ranged download, delete).
//
// Known differences from Appwrite 1.9.6 (everything else is meant to be exact):
//   - Transactions, bulk document calls, upsert (PUT), increment/decrement, relationship
//     and spatial attributes, attribute/index deletion and updates, and inline attributes
//     on collection create are not implemented; they answer 400 or 404.
//   - Passwords are salted SHA-256, not Argon2; the Users model reports hash "sha256".
//   - Attributes and indexes become available after Options.ProcessingDelay rather than
//     when a worker gets to them; a unique index over duplicate data ends "failed".
//   - Fulltext search matches word prefixes case-insensitively (MariaDB's boolean mode
//     differs in stemming and stop words).
//   - A chunked upload still in progress does not survive an emulator restart (Appwrite
//     keeps the chunks on disk); completed files do.
//   - Unknown API keys answer 401 user_unauthorized; Appwrite's wording may differ.
//   - Session metadata (client, OS, device, country) is blank.
//   - $updatedAt is bumped by at least one millisecond on every update, so optimistic
//     concurrency cannot miss a same-millisecond write.
//   - Responses carry no rate-limit headers; no abuse limits are enforced.
package appwritetest
