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
//
// Releases (releases.go, reconcile.go; issue 33 items 1-3). The desired-state head is the
// newest candidate (collection releases, id ReleaseID(seq)): a selection change writes one
// document holding the head's content (runconfig.Content) and its fingerprint, the plan,
// the operation state and so the reconciler's outbox entry (state collecting) — one
// create, the commit point, unique per head revision — then its audit entry under a
// deterministic id. Appwrite 1.9.6 has transactions that would cover these document
// writes (contracts/appwrite.md), but a single document needs none, works the same on
// every engine and in the emulator, and the reconciler's lease must be fenced anyway.
// The Reconciler takes a candidate's lease (a revision-guarded write) and writes its
// evidence (harness validation, the provider versions it saw, GPU qualification where a
// route serves something new, a probe run per role) with the revision that write made,
// so one whose lease was taken over cannot write. Promote needs passing evidence and,
// with two or more admins (unless SoloPromotion), an approver besides the author; it
// moves the live pointer (the system settings document: the live content and release id)
// in one revision-guarded write; Rollback moves it back to a release that was live,
// after checking it again. Runs keep the plan they were admitted with (its fingerprint
// covers the release's). Repair finishes what a crash left (audit entries, the
// promotion mark); TestKillAtEveryStep kills the process after every write and shows
// nothing half-done. Also TestTwoAdminRule, TestRollbackPinsAndCache,
// TestReconcilerLeaseFences. PromoteIn and RollbackIn do the same for one runtime
// environment: its own settings document (runconfig.EnvSettingsID, created by its first
// promotion) is its live pointer; without one it runs production's
// (TestEnvironmentReleases). The admin function's schedule runs the Reconciler's Pass every
// minute (functions/service/scheduled.go). The bootstrap's release 1 is live before its
// evidence, checked as planned on nothing; runconfig.Hold serves its roles only as the
// evidence clears their routes.
package settings
