package queue

import (
	"fmt"
	"regexp"
)

// PurgeRunsKey holds the runs whose events (the answer's text, tool previews, approval
// commands) are deleted once they have settled: the runs of a deleted conversation
// (member runId, score the Unix millisecond of the deletion). The agent's retention sweep
// (agent/outbox) deletes them from Appwrite and Redis.
const PurgeRunsKey = "pa:purge:runs"

// IssuerKeysKey holds the project issuer's signing keys (issuer.Keyring): a hash of kid →
// the private key and its dates. Only the agents read it (Redis ACL).
const IssuerKeysKey = "pa:issuer:keys"

// IssuerJWKSKey holds the issuer's public key set (a JWKS document), what
// GET /api/v1/jwks serves: the functions may read it, never the keys.
const IssuerJWKSKey = "pa:issuer:jwks"

// PurgeHomesKey holds the users whose Hermes homes (agent/homes: sessions, memory, files)
// every agent deletes: forgotten app users (member the owner id, score the Unix
// millisecond of the forget; a home made after it is a new user's and stays). Each
// agent's retention sweep applies it; entries go after HomesPurgeKeep.
const PurgeHomesKey = "pa:purge:homes"

// RoleChat is the interactive work role; others (research, coding, ...) are configured.
const RoleChat = "chat"

// DeviceQueue is the asynq queue of a GPU device: one per device, so per-device
// concurrency can be held by the agent that serves it.
func DeviceQueue(device string) string { return "gpu:" + device }

// Key layout in the dedicated Redis. Everything the project writes starts with "pa:";
// asynq owns "asynq:". Per-run keys share the {runId} hash tag so they stay together on
// one shard if the Redis is ever clustered.
//
//	pa:run:{id}:events   stream; entry id "<sequence>-0", field "e" = the event JSON
//	pa:run:{id}:control  stream; commands to the executor (cancel, approval)
//	pa:run:{id}:state    hash; status, terminal, heartbeatAt (hot copy of the record)
//	pa:run:{id}:owner    string; "<owner> <conversation>" of the run (immutable facts, cached)
//	pa:run:{id}:approval:{requestId}  string; the one recorded decision
//	pa:run:{id}:requeues counter; times the outbox re-enqueued the run after asynq archived its task
//	pa:admit:{runId}     string; the message sequence reserved for an admission
//	pa:conv:{id}:seq     string; the last message sequence of a conversation
//	pa:conv:{id}:owner   string; the conversation's owner (immutable, cached; "-" once deleted)
//	pa:user:{id}:feed    stream; the user's change feed, entry id "<sequence>-0", field "e" = JSON
//	pa:user:{id}:feedseq counter; the feed's last sequence
//	pa:rate:{owner}:{window}  counter; admissions in the current window
//	pa:plan:current      string; the current settings revision (short TTL)
//	pa:plan:{rev}:{role} string; the resolved execution plan (immutable)
//	pa:gpu:{device}      hash; the device heartbeat (hot copy of gpu_status)
//	pa:purge:runs        sorted set; runs of deleted conversations whose events go once settled
//	pa:purge:homes       sorted set; forgotten users whose Hermes homes every agent deletes
func EventsKey(runID string) string          { return "pa:run:{" + runID + "}:events" }
func ControlKey(runID string) string         { return "pa:run:{" + runID + "}:control" }
func StateKey(runID string) string           { return "pa:run:{" + runID + "}:state" }
func RunOwnerKey(runID string) string        { return "pa:run:{" + runID + "}:owner" }
func ApprovalKey(runID, reqID string) string { return "pa:run:{" + runID + "}:approval:" + reqID }
func RequeueKey(runID string) string         { return "pa:run:{" + runID + "}:requeues" }
func AdmitKey(runID string) string           { return "pa:admit:" + runID }
func ConvSeqKey(convID string) string        { return "pa:conv:{" + convID + "}:seq" }
func ConvOwnerKey(convID string) string      { return "pa:conv:{" + convID + "}:owner" }
func FeedKey(owner string) string            { return "pa:user:{" + owner + "}:feed" }
func FeedSeqKey(owner string) string         { return "pa:user:{" + owner + "}:feedseq" }
func RateKey(owner string, window int64) string {
	return fmt.Sprintf("pa:rate:%s:%d", owner, window)
}
func PlanPointerKey() string                { return "pa:plan:current" }
func PlanKey(rev int64, role string) string { return fmt.Sprintf("pa:plan:%d:%s", rev, role) }
func GPUKey(device string) string           { return "pa:gpu:" + device }
func GPUDevicesKey() string                 { return "pa:gpu:devices" }

var idRe = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]{0,35}$`)

// ValidID reports whether s is a valid Appwrite id (and so safe inside a key).
func ValidID(s string) bool { return idRe.MatchString(s) }

// ConvDeleted is what a deleted conversation's cached owner (ConvOwnerKey) becomes: set
// before anything of it is deleted, so admission refuses it and a late writer drops what
// it wrote (agent/executor DropLateWrites).
const ConvDeleted = "-"
