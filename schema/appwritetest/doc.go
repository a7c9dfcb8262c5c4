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
// # Engines
//
// Appwrite 1.9.6 stores documents through utopia-php/database 6.0.0 on MongoDB (the
// default of _APP_DB_ADAPTER: .env:37, app/init/registers.php:155, 412) or MariaDB 10.11
// (docker-compose.yml:1259), and the two differ. Options.Engine picks what is modelled:
//
//   - EngineMongoDB ("mongodb", the default, as in 1.9.6) and EngineMariaDB ("mariadb"):
//     the facts below, abuse limits on.
//   - EngineIdeal ("ideal"): one idealised database — unique indexes over any types,
//     case-sensitive ids and strings, integer $sequence in creation order, the stricter
//     chunk rules, no abuse limits. Only tests that assert that idealised behaviour choose
//     it, and say so; the project does not rely on it.
//
// New and NewTestServer read $PA_APPWRITE_ENGINE (EngineEnv) when Options.Engine is
// empty, so tests, make dev and make emulator switch together; cmd/appwrite-emulator
// takes -engine (default $PA_APPWRITE_ENGINE), -storage-device and -rate-limits.
// Options.StorageDevice (local, s3) is independent of the engine.
//
// Sources, read at these commits (paths relative to each repository):
// appwrite/appwrite tag 1.9.6 = 9f8423e2f6fd7237609524a16541430e19f9ee0e, whose
// composer.lock pins utopia-php/database 6.0.0 = fff9f0effbd40359ff925741ff9424856d8b4fde,
// utopia-php/mongo 1.1.0 = 73593682deee4696525a04e26524c1c1226e1530, utopia-php/storage
// 2.0.5 = b8af52e8ae1f9e670b32255a8936bbb46634b711, utopia-php/abuse 1.4.1 =
// 8f5df0274869cf9022eea7d8030ca1a0d458b3b2, ramsey/uuid 4.9.2. "Mongo.php" is
// utopia-php/database src/Database/Adapter/Mongo.php, likewise MariaDB.php, SQL.php,
// Database.php (src/Database/Database.php).
//
// # Both engines (mongodb and mariadb)
//
//   - Document and file ids are unique regardless of case: Mongo creates _uid unique with
//     collation {locale: en, strength: 1} (Mongo.php:494-503); MariaDB has _uid
//     VARCHAR(255) with UNIQUE KEY _uid (MariaDB.php:163, 182) and no collation anywhere
//     in the adapter: the schema's default applies — utf8mb4_general_ci when Appwrite
//     creates it (MariaDB.php:40, utf8mb4 without a collation), or the server default
//     (latin1_swedish_ci before MariaDB 11.6, per MariaDB's documentation) when the
//     image's MYSQL_DATABASE did; both are case-insensitive (_ci). Not verified on a
//     running server. Creating "note1" next to "Note1" → 409
//     document_already_exists (storage_file_already_exists for files, Files/Create.php
//     309-310, 449-450). Confirmed.
//   - A chunk re-sent for a completed upload answers 200 with the file: Files/Create.php
//     270-281 (src/Appwrite/Platform/Modules/Storage/Http/Buckets/Files/Create.php; the
//     issue's app/controllers/api/storage.php no longer exists at 1.9.6). Without
//     Content-Range the same request is still 409 storage_file_already_exists (l.271-272).
//     Confirmed.
//   - A chunk without x-appwrite-id uses the form's fileId: Files/Create.php:199
//     ($request->getHeaderLine('x-appwrite-id', $fileId)); fileId "unique()" is replaced
//     by a fresh id first (l.191), so such a chunk starts a new file that never completes.
//     Confirmed.
//   - Create with empty data → 400 document_missing_data: Documents/Create.php:155-165
//     (getSupportForEmptyDocument() is false for the legacy API, l.54-57); message from
//     app/config/errors.php:812-816. Confirmed.
//   - Update with no data and no permissions → 400 document_missing_payload:
//     Documents/Update.php:100-102, errors.php:817-821. Confirmed.
//   - Update does not need read permission: Update.php:124-131 reads the document with
//     authorization skipped; Database.php:6301-6320 then checks the update permission
//     (collection, plus the document's when documentSecurity) when something changes, and
//     the read permission when nothing does; a refusal is AuthorizationException → 401
//     user_unauthorized (app/controllers/general.php:1221-1222). $updatedAt is set only
//     when something changes (Database.php:6323-6325), to the current millisecond
//     (Database.php:6154, DateTime::now, format Y-m-d H:i:s.v), and X-Appwrite-Timestamp conflicts only when
//     the stored $updatedAt is strictly later (Database.php:6327-6331). Two writes in one
//     millisecond therefore share $updatedAt and the second's timestamp check passes; the
//     ideal engine's "at least +1 ms" bump is not upstream behaviour. Delete likewise
//     (Documents/Delete.php:131, Database.php:7744-7750). Confirmed, with the no-op and
//     millisecond details added.
//   - Abuse limits (on by default in both profiles; Options.RateLimits replaces them,
//     UpstreamRateLimits().Scaled(k) raises them, NoRateLimits() turns them off), from
//     app/controllers/api/account.php at 1.9.6:
//     createJWT (POST /v1/account/jwts) l.3113-3115: abuse-limit
//     APP_LIMIT_WRITE_RATE_DEFAULT times 2 = 120, abuse-time APP_LIMIT_WRITE_RATE_PERIOD_DEFAULT = 60 s
//     (app/init/constants.php:42-43), abuse-key url:{url},userId:{userId} — 120 per minute
//     per user;
//     sign-up (POST /v1/account) l.258: abuse-limit 10 with the default key url:{url},ip:{ip}
//     and time 3600 s (app/controllers/shared/api.php:495, 505) — 10 per hour per IP
//     (X-Forwarded-For first, _APP_TRUSTED_HEADERS, src/Appwrite/Utopia/Request.php:25);
//     email sessions (POST /v1/account/sessions/email) l.902-904: abuse-limit 10, key
//     url:{url},email:{param-email}, time 3600 s, abuse-reset [201] — every attempt
//     counts and a successful login resets the count (shared/api.php:863-895), so in
//     effect 10 failed logins per hour per email (the raw email parameter).
//     Counting is utopia-php/abuse 1.4.1: a fixed window aligned to the epoch
//     (src/Abuse/Adapters/TimeLimit/Redis.php:27), a request is allowed while the count
//     is below the limit and then counts, a refused one does not
//     (src/Abuse/Adapters/TimeLimit.php:51-66); 429 general_rate_limit_exceeded
//     (errors.php:52-56); API keys and privileged users are exempt (shared/api.php:490-
//     493); X-RateLimit-Limit/-Remaining/-Reset headers (shared/api.php:525-530).
//     Confirmed, with these numbers.
//
// # MongoDB profile
//
//   - Unique indexes hold only documents whose every indexed field is a BSON string.
//     Database::createIndex builds $indexAttributesWithTypes keyed by attribute name
//     (Database.php:4561-4575) and passes it to the adapter (Database.php:4668); the Mongo
//     adapter reads it by position, $indexAttributeTypes[$i] ?? VAR_STRING
//     (Mongo.php:1081-1091), so every attribute gets {$exists: true, $type: "string"} in
//     the partialFilterExpression. Integers, doubles and booleans are numbers, datetimes
//     and $createdAt/$updatedAt are UTCDateTime (Mongo.php:1455-1458), nulls are not
//     stored at all (removeNullKeys, Mongo.php:1307, 3601-3616). So a unique index over
//     (string, integer) — or over an integer alone — holds no document whose integer is
//     set and enforces nothing; building it over duplicates succeeds. An index over
//     strings is enforced, case-sensitively (Database.php:4668 passes no collation). The
//     API's indexes are made by the worker through Database::createIndex
//     (src/Appwrite/Platform/Modules/Databases/Workers/Databases.php:453). The same filter
//     applies to key indexes (slow queries, not modelled). Confirmed; the "mixed"
//     is narrower than the source: any non-string attribute defeats the index.
//   - Reading by id is exact: getDocument filters {_uid: id} without a collation
//     (Mongo.php:1240), so GET "NOTE1" for "Note1" is 404 although creating it is 409.
//   - String queries: equal and order are binary; contains is the regex .*v.* with the
//     'i' flag (Mongo.php:2807 with createSafeRegex's default flags, l.344); startsWith and
//     endsWith are the unanchored strings "v.*" and ".*v" (Mongo.php:2985, 2990), i.e.
//     case-sensitive substring matches. (Not in the issue; found while confirming.)
//   - $sequence is _id, a UUIDv7 (getIdAttributeType = VAR_UUID7, Mongo.php:3684-3687),
//     made by utopia-php/mongo 1.1.0's client on insert (src/Client.php:684-685,
//     createUuid = Uuid::uuid7, l.246-248): 48 bits of Unix milliseconds then random bits;
//     ramsey/uuid keeps it monotonic only within one PHP process, and Appwrite runs many
//     workers, so within one millisecond the order is random. The 1.8 response filter
//     turns any non-numeric $sequence into 0 (V21::castSequence,
//     src/Appwrite/Utopia/Response/Filters/V21.php:103-109, applied to document and
//     document lists l.50-55). Default list order and the cursor tie-break are $sequence.
//     Ordering by $sequence is allowed (Validator/Queries/Documents.php:44-49 lists it
//     for Validator/Query/Order.php; Database.php:8473-8481 appends it to every order), on
//     both engines; on MongoDB it orders only to the millisecond. Confirmed.
//
// # MariaDB profile
//
//   - Under the _ci collation, string equality (=) and LIKE (contains, startsWith,
//     endsWith: MariaDB.php:1555-1581), ordering, and unique indexes over strings ignore
//     case; reading by id ignores case too (SQL.php:396 WHERE _uid = :_uid), returning the
//     stored id. Unique indexes over mixed types are enforced (NULLs excluded). Confirmed.
//     Not modelled: general_ci also ignores trailing spaces and most Latin accents.
//   - An attribute is refused (400 attribute_limit_exceeded) once the collection's row
//     width would reach 65,535 bytes: Database.php:3242-3259 checkAttribute against
//     SQL.php:1145-1148 getDocumentSizeLimit, width per SQL.php:1159-1260
//     getAttributeWidth (VARCHAR 4 bytes a character up to 16,381, TEXT pointer 20
//     beyond). MongoDB's limit is 0, none (Mongo.php:3424-3427). The error message is
//     errors.php's generic one, not checked against 1.9.6's Attributes action.
//   - $sequence is _id BIGINT UNSIGNED AUTO_INCREMENT (MariaDB.php:162), numeric, so the
//     1.8 format keeps it; creation order (InnoDB's gaps after failed inserts are not
//     modelled).
//
// # Storage device (Options.StorageDevice)
//
// Files/Create.php:369 stores $deviceForFiles->getFileHash($path) as the signature.
// utopia-php/storage 2.0.5: Local returns md5_file (src/Storage/Device/Local.php:464-467);
// S3 (and the S3-type devices) returns the object's ETag (src/Storage/Device/S3.php:
// 580-585), and a chunked upload is an S3 multipart upload (S3.php:181-192, 204-228)
// whose ETag is md5(concat(md5(part)))-<parts>, not an MD5 of the content; a one-chunk
// file is a plain PUT whose ETag is the MD5. Confirmed (the ETag format is S3's).
//
// # Cost per request
//
// Document writes, reads by id and lists with an equal filter on a string attribute cost
// the same whatever the collection's size, as on a database with indexes: each
// collection keeps (never persisted) its documents by unique-index key, by case-folded id
// and by value of the string attributes lists filter on, and every write keeps them
// (uniqueindex.go; BenchmarkUniqueWrites compares 1,000 and 20,000 documents). Other
// lists scan the collection. With a data directory, a snapshot reuses each unchanged
// document's encoding and is written outside the lock (snapshot.go).
//
// # Known differences from Appwrite 1.9.6 (everything else is meant to be exact)
//
//   - Transactions, bulk document calls, upsert (PUT), increment/decrement, relationship
//     and spatial attributes, attribute/index deletion and updates, and inline attributes
//     on collection create are not implemented; they answer 400 or 404.
//   - Passwords are salted SHA-256, not Argon2; the Users model reports hash "sha256".
//   - Attributes and indexes become available after Options.ProcessingDelay rather than
//     when a worker gets to them; a unique index over duplicate data ends "failed".
//   - Fulltext search is modelled per engine (fulltext.go: MariaDB's boolean mode with
//     the last word a prefix, InnoDB's 3-character minimum and stopwords; Mongo's $text
//     with whole words and language "none"), not relevance: results keep the query's order.
//   - A chunked upload still in progress does not survive an emulator restart (Appwrite
//     keeps the chunks on disk); completed files do.
//   - Unknown API keys answer 401 user_unauthorized; Appwrite's wording may differ.
//   - Session metadata (client, OS, device, country) is blank.
//   - Ideal engine only: $updatedAt is bumped by at least one millisecond on every update,
//     so optimistic concurrency cannot miss a same-millisecond write, and an update that
//     changes nothing still needs update (and read) permission and bumps $updatedAt.
//   - Abuse limits are modelled for createJWT, sign-up and email sessions only (the other
//     labelled routes — e.g. document create 120/min and file create 60/min per IP and
//     user — are not), and only on the mongodb and mariadb engines by default.
//   - Unique indexes over string arrays on mongodb are not modelled as multikey indexes.
package appwritetest
