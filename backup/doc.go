// Package backup writes and restores one archive of the project's data through
// Appwrite's API (issue 18; the drill is in deploy/RUNBOOK.md).
//
// # The archive
//
// A tar file, owner-only (0600), whose first member is manifest.json: the format version
// (FormatVersion), the application version, the schema (SchemaVersion, a fingerprint of
// schema.Definition, every collection's attributes and the bucket ids), where it came
// from (endpoint, project, database), the buckets it holds with their counts, the key
// *reference* used (env:NAME or file:/path, never a key), counts, and the size and
// SHA-256 of every other member:
//
//	manifest.json
//	documents/<collection>.jsonl   one document per line: its fields, $id, $permissions,
//	                               $createdAt, $updatedAt (not $sequence, which the
//	                               server assigns)
//	buckets/<bucket>/files.jsonl   for every bucket of the model (artifacts, uploads, …):
//	                               one line per file: id, name, MIME type, permissions,
//	                               size, SHA-256
//	buckets/<bucket>/files/<id>    the bytes
//
// That is format 2. Format 1 (before the uploads bucket) held one bucket, the artifacts
// (manifest "bucket"), as files.jsonl and files/<id> at the root; Restore still reads it
// (TestRestoreReadsAFormat1Archive), and then checks the uploads bucket is empty.
//
// Redis is not in it: it holds caches, hot streams and the queue, which the outbox
// rebuilds from the runs.
//
// # Backup: resumable
//
// Backup lists every collection of the model by cursor (cursorAfter, pages of
// Options.PageSize) and every file of every bucket of the model (schema.Model.Buckets,
// not a fixed list), and works in <archive>.partial/: each page is appended to its lines
// file and fsynced, then state.json records the cursor and the file's length. Run again
// after an interruption, it cuts each lines file back to the recorded length and goes on
// from the cursor (a journal a format 1 build left keeps its documents and lists the
// buckets again). The archive is written to a temporary
// file and renamed into place only when complete. A backup of a live project is
// consistent per record, not across records (a run may have moved on between the runs
// page and its events page); every record is still one that existed.
//
// # Restore: re-runnable, verified, nothing replayed
//
// Restore extracts the archive to a private temporary directory, checking every member
// against the manifest (ErrChecksum), refuses an archive whose schema has anything the
// target's model lacks (ErrSchema: the schema only grows, so an older archive restores into
// a newer schema, never the other way), and checks the target is provisioned
// (ErrNotProvisioned). Then, in this order:
//
//  1. every file of every bucket the archive holds, with its id and permissions (an
//     attached upload stays read/delete for its uploader only; a complete file already
//     there must have the same bytes and permissions; an incomplete one a crashed restore
//     left is replaced); an archive with a bucket the target's model lacks is ErrSchema;
//  2. every collection but runs, then runs (after their bindings, so the outbox never sees
//     a run without bindings): each document created with its id, permissions and
//     $createdAt/$updatedAt (Appwrite 1.9.6 lets a key set both on create); a document
//     already there must equal the archived one, so a re-run completes a partial restore
//     and anything else is ErrNotEmpty;
//  3. every run that was live but not queued (waiting_for_resource, running,
//     waiting_for_approval, cancelling) is ended interrupted with InterruptedReason
//     through runstate (a version claim, then the record): whatever it had started
//     natively is unknown to the restored project, so it is never executed again and no
//     tool side effect is replayed. A queued run whose cancel was requested (the
//     cancel path had not settled it when the backup was taken) ends cancelled
//     (CancelledReason): the outbox never enqueues it. A terminal run is never touched;
//  4. Verify reads everything back: each archived record equal (an interrupted run in all
//     but status, errorSummary, finishedAt, version and $updatedAt), each file's size,
//     SHA-256 and permissions in its bucket, and nothing extra but the interruptions'
//     version claims.
//
// Queued runs stay queued: the agent's outbox (agent/outbox) finds each one without a
// task and enqueues exactly one (TaskID = run id). Stop the agents while restoring, so no
// resume scan picks up a live run before step 3 ends it.
//
// Tests: TestRehearsal (backup interrupted and resumed, restore interrupted and re-run,
// every document and byte compared, Redis wiped: each queued run runs once and nothing
// else runs), TestBackupRestoresAttachedUploads (a message's attached file comes back in
// the uploads bucket with its id, bytes and owner-only permissions), TestRestoreRefuses* (a tampered archive, a newer schema, a project that is
// not empty), BenchmarkBackupRestore (10,000 documents and 100 files, `make bench`).
// The drill's browser end is scripts/dev TestRestoreDrillInTheBrowser: a conversation held
// in the web chat of one dev stack, backed up, restored into a fresh stack
// (Config.Restore), then read and its file downloaded (same SHA-256) in Chromium.
package backup
