package queue

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
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
//	pa:plan:current      string; the live release's fingerprint (short TTL)
//	pa:plan:current:rev  string; the live pointer's revision it was set at (forward only)
//	pa:plan:{fp}:{role}  string; the resolved execution plan of a release (immutable)
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
func PlanPointerKey() string    { return "pa:plan:current" }     // the live release's fingerprint
func PlanPointerRevKey() string { return "pa:plan:current:rev" } // the live pointer's revision it was set at

// EnvPlanPointerKey and EnvPlanPointerRevKey are a runtime environment's plan pointer (a
// release fingerprint, or "=": production's) and its revision (runconfig.Cache.GetIn).
func EnvPlanPointerKey(env string) string    { return "pa:plan:env:" + env }
func EnvPlanPointerRevKey(env string) string { return "pa:plan:env:" + env + ":rev" }
func PlanKey(fingerprint, role string) string {
	return fmt.Sprintf("pa:plan:%s:%s", fingerprint, role)
}
func GPUKey(device string) string { return "pa:gpu:" + device }
func GPUDevicesKey() string       { return "pa:gpu:devices" }

// ProbeKey is the hash of a release's probe run for one role (settings' reconciler and
// the agent's probe handler): queuedAt (when the reconciler enqueued it), then what the
// agent answered: ok ("1"/"0"), detail, model, tokens, latencyMs, at. It expires after
// ProbeKeyTTL.
func ProbeKey(fingerprint, role string) string { return "pa:probe:" + fingerprint + ":" + role }

// ReconcilerPassKey holds the last scheduled reconciler pass (its execution id) for
// PA_RECONCILE_GAP: two passes never start closer than that.
func ReconcilerPassKey() string { return "pa:reconciler:pass" }

var idRe = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]{0,35}$`)

// ValidID reports whether s is a valid Appwrite id (and so safe inside a key).
func ValidID(s string) bool { return idRe.MatchString(s) }

// ConvDeleted is what a deleted conversation's cached owner (ConvOwnerKey) becomes: set
// before anything of it is deleted, so admission refuses it and a late writer drops what
// it wrote (agent/executor DropLateWrites).
const ConvDeleted = "-"

// The agent's own keys (no function reads them: Redis ACL).
//
//	pa:run:{id}:lease      string; the executor's lease of a run (agent/executor)
//	pa:run:{id}:leasegen   counter; leases ever taken on the run (names its resume tasks)
//	pa:leases:{queue}      sorted set; the runs of a queue leased by an executor, score the
//	                       lease's expiry (Unix ms, Redis's clock): the resume scan's index
//	pa:resume:{queue}:backstop string; held (with a TTL) by the agent that ran the queue's
//	                       last full resume listing
//	pa:run:{id}:backoff    string; a run's retry backoff; :backoff:n its count
//	pa:run:{id}:nativeseq  string; the last native event sequence applied
//	pa:run:{id}:pause      string; a swap's request that the run yields
//	pa:run:{id}:gateway    hash; the inference gateway's token usage of the run
//	pa:run:{id}:attempt    string; the run's current attempt (queue/eventlog's fence)
//	pa:gpu:{device}:control string; the device's control lease (agent/gpu)
//	pa:gpu:{device}:gen    counter; the device's lease generation
//	pa:immich:{agent}:paused string; the Immich jobs an agent paused (agent/immich)
//	pa:mcp:job:{job}, pa:mcp:conv:{id}:jobs, pa:mcp:pending:{fp}, pa:mcp:claimed:{fp},
//	pa:mcp:appcall:{req}   the MCP job server's records (agent/mcpjobs)
//	pa:retention:tasks     sorted set; the retention sweep's due tasks (agent/outbox)
func LeaseKey(runID string) string        { return "pa:run:{" + runID + "}:lease" }
func LeaseGenKey(runID string) string     { return "pa:run:{" + runID + "}:leasegen" }
func LeasesKey(queue string) string       { return "pa:leases:{" + queue + "}" }
func BackstopKey(queue string) string     { return "pa:resume:{" + queue + "}:backstop" }
func BackoffKey(runID string) string      { return "pa:run:{" + runID + "}:backoff" }
func BackoffCountKey(runID string) string { return "pa:run:{" + runID + "}:backoff:n" }
func NativeSeqKey(runID string) string    { return "pa:run:{" + runID + "}:nativeseq" }
func PauseKey(runID string) string        { return "pa:run:{" + runID + "}:pause" }
func GatewayUsageKey(runID string) string { return "pa:run:{" + runID + "}:gateway" }
func AttemptKey(runID string) string      { return "pa:run:{" + runID + "}:attempt" }
func GPUControlKey(device string) string  { return "pa:gpu:{" + device + "}:control" }
func GPUGenKey(device string) string      { return "pa:gpu:{" + device + "}:gen" }
func ImmichPausedKey(agent string) string { return "pa:immich:{" + agent + "}:paused" }
func MCPJobKey(job string) string         { return "pa:mcp:job:" + job }
func MCPConvJobsKey(conv string) string   { return "pa:mcp:conv:" + conv + ":jobs" }
func MCPPendingKey(fp string) string      { return "pa:mcp:pending:" + fp }
func MCPClaimedKey(fp string) string      { return "pa:mcp:claimed:" + fp }
func MCPAppCallKey(req string) string     { return "pa:mcp:appcall:" + req }

// RetentionTasksKey holds the retention sweep's due tasks (agent/outbox).
const RetentionTasksKey = "pa:retention:tasks"

// RunKeyPrefix starts every per-run key; RunStateKeyPattern matches every run's hot
// state (a SCAN pattern); RunIDOfKey reads the run id back out of a per-run key.
const (
	RunKeyPrefix       = "pa:run:{"
	RunStateKeyPattern = "pa:run:{*}:state"
)

// RunIDOfKey is the run id of a per-run key ("" when key is not one).
func RunIDOfKey(key string) string {
	rest, ok := strings.CutPrefix(key, RunKeyPrefix)
	if !ok {
		return ""
	}
	id, _, ok := strings.Cut(rest, "}")
	if !ok {
		return ""
	}
	return id
}

// Keys of the functions' own (the runtime API, host-app tools, conversation creation,
// the long-poll hub), the stream service's heartbeat and the agents' readiness reports.
//
//	pa:apptools:{app}          hash; an app's declared tools; :secret its signing secret
//	pa:rt:user:{id}            string; a derived app user that exists (its label)
//	pa:rt:rate:{key}:{window}  counter; a runtime key's calls in a window
//	pa:rate:conv:{owner}:{win} counter; conversations created in a window
//	pa:longpoll:wake:{random}  stream; one hub shard's wake-ups
//	pa:route:{route}:qualify   hash; a route's qualification status
//	pa:alive:stream, pa:alive:agents, pa:alive:agent:{id}  heartbeats and readiness reports
func AppToolsKey(app string) string       { return "pa:apptools:{" + app + "}" }
func AppToolsSecretKey(app string) string { return "pa:apptools:{" + app + "}:secret" }
func RTUserKey(id string) string          { return "pa:rt:user:" + id }
func RTRateKey(key string, win int64) string {
	return "pa:rt:rate:" + key + ":" + strconv.FormatInt(win, 10)
}
func ConvRateKey(owner string, win int64) string {
	return "pa:rate:conv:" + owner + ":" + strconv.FormatInt(win, 10)
}
func LongPollWakeKey(id string) string     { return "pa:longpoll:wake:" + id }
func QualifyStatusKey(route string) string { return "pa:route:" + route + ":qualify" }
func StreamAliveKey() string               { return "pa:alive:stream" }
func AgentsReadyKey() string               { return "pa:alive:agents" }
func AgentReadyKey(agent string) string    { return "pa:alive:agent:" + agent }
