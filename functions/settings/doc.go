// Package settings is the admin side of configuration as desired state with immutable
// revisions (seed 000: typed mutation → semantic plan → atomic revision + audit).
//
// Harness profiles and model routes are never edited: a change is a new revision record,
// created with a deterministic, lower-cased document id (runconfig.RevisionDocID), which
// every Appwrite engine keeps unique, so two admins committing against the same revision
// cannot both win. The system settings document (which revision each work role
// uses, the tool ceiling) is one revision-guarded document: a commit names the revision
// it was planned on, and a stale one is refused with the current revision.
//
// Every mutation is planned first (what changes, which roles and routes are affected, how
// many queued or running runs stay pinned to the old revisions); the commit re-plans
// against the expected revision and writes. Each revision record or settings document
// carries who/when/what (lastChange), and the audit record has a deterministic id, so a
// crash between the write and the audit is repaired on the next admin call: the old state
// stays intact or the new one is whole.
package settings
