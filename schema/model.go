package schema

// Collection IDs. They are stable names on the server: never rename one.
const (
	CollConversations    = "conversations"
	CollMessages         = "messages"
	CollRuns             = "runs"
	CollEvents           = "events"
	CollArtifacts        = "artifacts"
	CollContextSnapshots = "context_snapshots"
	CollHarnessProfiles  = "harness_profiles"
	CollModelRoutes      = "model_routes"
	CollSettings         = "settings"
	CollGPUStatus        = "gpu_status"
	CollRunBindings      = "run_bindings"
	CollAudit            = "audit"
	CollVersions         = "versions"
	CollInvitations      = "invitations"
	CollReleases         = "releases"

	// BucketArtifacts is the private bucket for run outputs and oversized content.
	BucketArtifacts = "artifacts"
	// BucketUploads holds the files members attach to their messages (uploads.go).
	BucketUploads = "uploads"

	// DefaultDatabaseID is used when APPWRITE_DATABASE_ID is not set.
	DefaultDatabaseID = "privateassistant"

	// MaxArtifactBytes is the bucket's file size limit (20 MiB).
	MaxArtifactBytes = 20 << 20
)

// Sizes of the bounded text fields. Content beyond the overflowing ones (message text,
// event data, context snapshots) goes whole to a private file and the record keeps its id
// (overflow.go); the others are hard limits, checked before every write.
const (
	SizeID            = 36
	SizeRequestID     = 64
	SizeTitle         = 200
	SizeMessageText   = 16384
	SizeEventData     = 8192
	SizeSnapshot      = 65536
	SizeError         = 1024
	SizeJSONSmall     = 4096
	SizeNativeID      = 256
	SizeModelName     = 256
	SizeQueueReason   = 256
	SizeURL           = 2048
	SizeDevice        = 64
	SizeRole          = 32
	SizeSequenceKey   = SizeID + 1 + 20 // "<conversationId>.<sequence>"
	SizeRunPatch      = 8192
	SizeVersionTarget = 64 + 1 + SizeID
	SizeLabel         = 36 // an Appwrite user label (alphanumeric, at most 36)
	SizeEnvironment   = 12 // an environment name (runtimeapi.ValidEnv)
	// SizeMetadata holds the runtime API's response metadata as JSON: 16 pairs of a
	// 64-character key and a 512-character value, every character escaped as \uXXXX at
	// worst, is 55,394 characters.
	SizeMetadata = 60000

	// SizeReleaseText holds a release's content, plan, evidence or approvals: past
	// 16,381 characters MariaDB stores it as TEXT, outside the row width.
	SizeReleaseText = 20000

	// MaxOwnerLabels bounds Run.OwnerLabels.
	MaxOwnerLabels = 32
)

// RunStatus is a run's status (docs/design/agent.md). Terminal: completed, failed, cancelled,
// interrupted. Which status may follow which is the transition table in schema/runstate,
// and every status change goes through runstate.
type RunStatus string

// Run statuses.
const (
	RunQueued             RunStatus = "queued"
	RunWaitingForResource RunStatus = "waiting_for_resource"
	RunRunning            RunStatus = "running"
	RunWaitingForApproval RunStatus = "waiting_for_approval"
	RunCancelling         RunStatus = "cancelling"
	RunCompleted          RunStatus = "completed"
	RunFailed             RunStatus = "failed"
	RunCancelled          RunStatus = "cancelled"
	RunInterrupted        RunStatus = "interrupted"
)

// RunStatuses lists every run status in lifecycle order.
var RunStatuses = []RunStatus{RunQueued, RunWaitingForResource, RunRunning, RunWaitingForApproval,
	RunCancelling, RunCompleted, RunFailed, RunCancelled, RunInterrupted}

// String implements fmt.Stringer (the store validates enums through it).
func (s RunStatus) String() string { return string(s) }

// Terminal reports whether the status is final.
func (s RunStatus) Terminal() bool {
	switch s {
	case RunCompleted, RunFailed, RunCancelled, RunInterrupted:
		return true
	}
	return false
}

// IsTerminal reports whether a run status (typed, or as read from a wire string) is final.
func IsTerminal[S ~string](status S) bool { return RunStatus(status).Terminal() }

func runStatusNames() []string {
	out := make([]string, len(RunStatuses))
	for i, s := range RunStatuses {
		out[i] = string(s)
	}
	return out
}

// Message roles.
var MessageRoles = []string{"user", "assistant", "system"}

// GPU device states as observed (docs/design/gpu.md): a stale heartbeat reads "unknown".
var GPUStates = []string{"idle", "loading", "ready", "busy", "unloading", "unknown", "failed"}

// Harness kinds.
var HarnessKinds = []string{"hermes", "direct"}

func i64(v int64) *int64 { return &v }

func str(key string, size int, required bool) Attribute {
	return Attribute{Key: key, Type: TypeString, Size: size, Required: required}
}

// overflowing makes a string attribute's longer values go whole to a file whose id
// fileKey holds (overflow.go).
func overflowing(a Attribute, fileKey string) Attribute {
	a.Overflow = fileKey
	return a
}

func integer(key string, required bool, min, max int64) Attribute {
	return Attribute{Key: key, Type: TypeInteger, Required: required, Min: i64(min), Max: i64(max)}
}

func when(key string, required bool) Attribute {
	return Attribute{Key: key, Type: TypeDatetime, Required: required}
}

func flag(key string, def bool) Attribute {
	return Attribute{Key: key, Type: TypeBoolean, Default: def}
}

func enum(key string, required bool, elements ...string) Attribute {
	return Attribute{Key: key, Type: TypeEnum, Required: required, Elements: elements}
}

const maxInt = 1<<53 - 1 // safe in JSON numbers on every client

// Definition is the project's data model (docs/design/data.md).
func Definition(databaseID string) Model {
	if databaseID == "" {
		databaseID = DefaultDatabaseID
	}
	owner := str("ownerId", SizeID, true)
	return Model{
		DatabaseID:   databaseID,
		DatabaseName: "Private Assistant",
		Collections: append([]Collection{
			{
				ID: CollConversations, Name: "Conversations", UserVisible: true, DocumentSecurity: true,
				Attributes: []Attribute{
					owner,
					str("title", SizeTitle, true),
					when("lastActivityAt", true),
				},
				Indexes: []Index{
					{Key: "owner_activity", Type: IndexKey, Attributes: []string{"ownerId", "lastActivityAt"}, Orders: []string{"ASC", "DESC"}},
				},
			},
			{
				ID: CollMessages, Name: "Messages", UserVisible: true, DocumentSecurity: true,
				Attributes: []Attribute{
					owner,
					str("conversationId", SizeID, true),
					integer("sequence", true, 1, maxInt),
					enum("role", true, MessageRoles...),
					overflowing(str("text", SizeMessageText, false), "textFileId"),
					str("textFileId", SizeID, false), // text beyond SizeMessageText lives whole in the bucket
					str("runId", SizeID, false),
					str("requestId", SizeRequestID, false),
					// "<conversationId>.<sequence>", lower-case (SequenceKey): the string-typed
					// key that makes (conversation, sequence) unique on every engine. Set by
					// Table.Create; optional only because deployments from before issue 12
					// hold messages without it (README: migrating).
					str("sequenceKey", SizeSequenceKey, false),
					// Ids of files in BucketUploads attached to a user message (at most
					// MaxAttachments; admission checks each is the owner's). Null before issue 17.
					{Key: "attachments", Type: TypeString, Size: SizeID, Array: true},
					// The user message this one follows on its branch (Message.ParentID:
					// edits, regenerations and retries are siblings). Null before issue 34
					// and when a client names none: the previous user message by sequence.
					str("parentId", SizeID, false),
				},
				Indexes: []Index{
					// Unique over one string attribute: enforced on MongoDB and MariaDB alike
					// (a unique index with a non-string attribute is not, on MongoDB).
					{Key: "sequence_key", Type: IndexUnique, Attributes: []string{"sequenceKey"}},
					{Key: "conversation_order", Type: IndexKey, Attributes: []string{"conversationId", "sequence"}},
					{Key: "owner", Type: IndexKey, Attributes: []string{"ownerId"}},
					{Key: "run", Type: IndexKey, Attributes: []string{"runId"}},
					// Search over what was said (GET /api/search, issue 34): MATCH … AGAINST in
					// boolean mode on MariaDB, $text on MongoDB (the one text index a collection
					// may have). What each engine matches differs: schema/appwritetest models it.
					{Key: "text_search", Type: IndexFulltext, Attributes: []string{"text"}},
				},
			},
			{
				ID: CollRuns, Name: "Runs", UserVisible: true, DocumentSecurity: true,
				Attributes: []Attribute{
					owner,
					str("conversationId", SizeID, true),
					str("messageId", SizeID, true),
					str("requestId", SizeRequestID, true),
					str("role", SizeRole, true),
					enum("status", true, runStatusNames()...),
					str("phase", 64, false),
					integer("progressCompleted", false, 0, maxInt),
					integer("progressTotal", false, 0, maxInt),
					str("queueReason", SizeQueueReason, false),
					integer("queuePosition", false, 0, maxInt),
					str("checkpoint", 128, false),
					flag("cancelRequested", false),
					when("queuedAt", true),
					when("startedAt", false),
					when("finishedAt", false),
					when("heartbeatAt", false),
					integer("lastSequence", false, 0, maxInt),
					str("assistantMessageId", SizeID, false),
					str("errorSummary", SizeError, false),
					str("usage", 1024, false),
					// Written by every status change (schema/runstate), each version claimed
					// first in versions. Null on runs written before issue 12: version 0.
					integer("version", false, 0, maxInt),
					// The owner's labels as admission verified them (Run.OwnerLabels): the
					// labels a job this run enqueues is admitted with. Null before issue 19.
					{Key: "ownerLabels", Type: TypeString, Size: SizeLabel, Array: true},
					// The run whose response this one continues (the runtime API's
					// previous_response_id; Run.PreviousRunID). Null otherwise.
					str("previousRunId", SizeID, false),
					// The failed, cut-off or interrupted run this one retries (Run.RetryOf).
					str("retryOf", SizeID, false),
					// The runtime API's response metadata (Run.Metadata), JSON. Over
					// 16,381 characters, so a TEXT on MariaDB (20 bytes of row width).
					str("metadata", SizeMetadata, false),
					// The runtime key's environment the run was admitted in (Run.Environment):
					// a job it delegates is planned on that environment's release. Null:
					// production (and runs admitted before issue 35).
					str("environment", SizeEnvironment, false),
				},
				Indexes: []Index{
					{Key: "owner_request", Type: IndexUnique, Attributes: []string{"ownerId", "requestId"}},
					{Key: "owner_status", Type: IndexKey, Attributes: []string{"ownerId", "status"}},
					{Key: "conversation", Type: IndexKey, Attributes: []string{"conversationId"}},
					{Key: "status", Type: IndexKey, Attributes: []string{"status"}},
					// A user's runs newest first (GET /api/runs): ordered by an attribute,
					// never by $sequence (a UUIDv7 on MongoDB, ordered only to the ms).
					{Key: "owner_queued", Type: IndexKey, Attributes: []string{"ownerId", "queuedAt"}, Orders: []string{"ASC", "DESC"}},
				},
			},
			{
				ID: CollEvents, Name: "Events", UserVisible: true, DocumentSecurity: true,
				Attributes: []Attribute{
					owner,
					str("runId", SizeID, true),
					integer("sequence", true, 1, maxInt),
					str("type", 64, true),
					overflowing(str("data", SizeEventData, false), "dataFileId"),
					// Data beyond SizeEventData lives whole in the bucket (issue 12). Null on
					// events written before; those carried {"truncated":true} instead.
					str("dataFileId", SizeID, false),
				},
				Indexes: []Index{
					// (runId, sequence) is unique by the document id (EventDocID); this index only
					// orders a run's events.
					{Key: "run_order", Type: IndexKey, Attributes: []string{"runId", "sequence"}},
					{Key: "owner", Type: IndexKey, Attributes: []string{"ownerId"}},
				},
			},
			{
				ID: CollArtifacts, Name: "Artifacts", UserVisible: true, DocumentSecurity: true,
				Attributes: []Attribute{
					owner,
					str("conversationId", SizeID, true),
					str("runId", SizeID, true),
					str("filename", 255, true),
					str("mimeType", 127, true),
					integer("size", true, 0, maxInt),
					str("checksum", 64, true), // sha256, hex
					str("bucketId", SizeID, true),
					str("fileId", SizeID, true),
				},
				Indexes: []Index{
					{Key: "bucket_file", Type: IndexUnique, Attributes: []string{"bucketId", "fileId"}},
					{Key: "run", Type: IndexKey, Attributes: []string{"runId"}},
					{Key: "owner", Type: IndexKey, Attributes: []string{"ownerId"}},
					{Key: "conversation", Type: IndexKey, Attributes: []string{"conversationId"}},
				},
			},
			{
				ID: CollContextSnapshots, Name: "Context snapshots", DocumentSecurity: true,
				Attributes: []Attribute{
					owner,
					str("conversationId", SizeID, true),
					integer("throughSequence", true, 0, maxInt),
					overflowing(str("context", SizeSnapshot, false), "contextFileId"),
					str("contextFileId", SizeID, false), // a context beyond SizeSnapshot, whole
					str("checksum", 64, true),
				},
				Indexes: []Index{
					{Key: "conversation", Type: IndexKey, Attributes: []string{"conversationId"}},
				},
			},
			{
				ID: CollHarnessProfiles, Name: "Harness profiles", DocumentSecurity: true,
				Attributes: []Attribute{
					str("profileId", SizeID, true),
					integer("revision", true, 1, maxInt),
					enum("kind", true, HarnessKinds...),
					str("baseUrl", SizeURL, true),
					str("profileName", 128, false),
					str("keyRef", 256, false), // the name of a secret, never its value
					str("capabilities", SizeJSONSmall, false),
					flag("verified", false),
					when("verifiedAt", false),
					str("hermesVersion", 64, false),
					str("hermesCommit", 1024, false),     // a commit, or "unknown: <why>"
					when("validationRequestedAt", false), // an admin asked the agent to validate this revision (cleared with the result)
					when("checkFailedAt", false),         // a re-validation of a verified revision failed (cleared by a passing one)
					str("checkFailure", 1024, false),     // why it failed
					str("createdBy", SizeID, false),
				},
				Indexes: []Index{
					// (profileId, revision) is unique by the document id (runconfig.RevisionDocID).
					{Key: "profile_order", Type: IndexKey, Attributes: []string{"profileId", "revision"}},
				},
			},
			{
				ID: CollModelRoutes, Name: "Model routes", DocumentSecurity: true,
				Attributes: []Attribute{
					str("routeId", SizeID, true),
					integer("revision", true, 1, maxInt),
					str("alias", 64, true),
					str("device", SizeDevice, true),
					str("backendModel", SizeModelName, true),
					integer("contextBudget", true, 1, maxInt),
					integer("maxOutput", false, 1, maxInt),
					flag("localOnly", true),
					flag("enabled", true),
					str("createdBy", SizeID, false),
					// The GPU qualification this revision carries (runconfig.Qualification, JSON):
					// the selection gate needs a passing one for its device, model and budget.
					str("qualification", SizeJSONSmall, false),
				},
				Indexes: []Index{
					// (routeId, revision) is unique by the document id (runconfig.RevisionDocID).
					{Key: "route_order", Type: IndexKey, Attributes: []string{"routeId", "revision"}},
					{Key: "alias", Type: IndexKey, Attributes: []string{"alias"}},
				},
			},
			{
				ID: CollSettings, Name: "Settings", DocumentSecurity: true,
				Attributes: []Attribute{
					owner, // a user id, or "system" for the installation-wide settings
					integer("revision", true, 1, maxInt),
					str("defaultHarness", SizeID, false),
					integer("defaultHarnessRevision", false, 1, maxInt),
					str("roles", SizeJSONSmall, false),       // role → {harness, revision, route, revision, tools}
					str("toolCeiling", SizeJSONSmall, false), // admin ceiling of the tool policy
					str("lastChange", 2048, false),           // who/when/what of this revision (audit repair)
					// The system document is the live pointer: the release it serves (a
					// releases document id; absent before the first promotion).
					str("release", SizeID, false),
				},
				Indexes: []Index{
					{Key: "owner", Type: IndexUnique, Attributes: []string{"ownerId"}},
				},
			},
			{
				ID: CollGPUStatus, Name: "GPU status", DocumentSecurity: true,
				Attributes: []Attribute{
					str("device", SizeDevice, true),
					str("host", 128, true),
					enum("state", true, GPUStates...),
					str("loadedModel", SizeModelName, false),
					str("activeModel", SizeModelName, false),
					integer("memoryUsedBytes", false, 0, maxInt),
					integer("memoryTotalBytes", false, 0, maxInt),
					{Key: "temperatureC", Type: TypeFloat},
					{Key: "powerW", Type: TypeFloat},
					str("leaseHolder", 128, false),
					integer("leaseGeneration", false, 0, maxInt),
					integer("queueDepth", false, 0, maxInt),
					when("heartbeatAt", true),
				},
				Indexes: []Index{
					{Key: "device", Type: IndexUnique, Attributes: []string{"device"}},
				},
			},
			{
				ID: CollRunBindings, Name: "Run bindings", DocumentSecurity: true,
				Attributes: []Attribute{
					owner,
					str("runId", SizeID, true),
					str("conversationId", SizeID, true),
					str("messageId", SizeID, true),
					str("contextSnapshotId", SizeID, true),
					str("harnessProfileId", SizeID, true),
					integer("harnessRevision", true, 1, maxInt),
					str("routeId", SizeID, true),
					integer("routeRevision", true, 1, maxInt),
					str("toolPolicy", 2048, false),
					str("planFingerprint", 64, false),
					str("queue", 64, true),
					str("nativeSessionId", SizeNativeID, false),
					str("nativeRunId", SizeNativeID, false),
					integer("attempt", false, 0, maxInt),
					str("attemptToken", 64, false),
					str("pendingApprovalId", SizeNativeID, false),
					str("harnessCheck", SizeJSONSmall, false), // the harness's build and capabilities at the latest submission
				},
				Indexes: []Index{
					{Key: "run", Type: IndexUnique, Attributes: []string{"runId"}},
					{Key: "conversation", Type: IndexKey, Attributes: []string{"conversationId"}},
				},
			},
			{
				// One document per version of a versioned record (a run record, the
				// settings), id VersionDocID(collection, record, version), created before the
				// record is written (schema/runstate, Table.UpdateRevision): $id uniqueness is
				// enforced on every engine, so exactly one writer owns each version. Server
				// only; kept as long as the record.
				ID: CollVersions, Name: "Versions", DocumentSecurity: true,
				Attributes: []Attribute{
					str("target", SizeVersionTarget, true), // "<collection>/<record id>"
					integer("version", true, 1, maxInt),
					str("patch", SizeRunPatch, true), // the version's patch, JSON (roll-forward)
				},
				Indexes: []Index{
					{Key: "target", Type: IndexKey, Attributes: []string{"target"}},
				},
			},
			{
				ID: CollAudit, Name: "Audit", DocumentSecurity: true,
				Attributes: []Attribute{
					str("actorId", SizeID, true),
					str("action", 64, true),
					str("target", 128, true),
					integer("fromRevision", false, 0, maxInt),
					integer("toRevision", false, 0, maxInt),
					str("detail", SizeJSONSmall, false),
					when("at", true),
				},
				Indexes: []Index{
					{Key: "actor", Type: IndexKey, Attributes: []string{"actorId"}},
					{Key: "target", Type: IndexKey, Attributes: []string{"target"}},
					// The audit newest first (GET /api/audit), by the entry's time.
					{Key: "at", Type: IndexKey, Attributes: []string{"at"}, Orders: []string{"DESC"}},
				},
			},
			{
				// Configuration candidates and releases (settings/releases.go): one
				// document per head revision, id runconfig.RevisionDocID("release", seq);
				// content immutable, the rest revision guarded. Server only.
				ID: CollReleases, Name: "Releases", DocumentSecurity: true,
				Attributes: []Attribute{
					integer("seq", true, 1, maxInt),
					integer("revision", true, 1, maxInt),
					integer("basedOn", true, 0, maxInt),
					enum("state", true, ReleaseStates...),
					str("fingerprint", 64, true),
					str("content", SizeReleaseText, true), // runconfig.Content, JSON
					str("plan", SizeReleaseText, false),   // the semantic plan, JSON
					str("createdBy", SizeID, true),
					when("createdAt", true),
					str("evidence", SizeReleaseText, false), // the reconciler's evidence, JSON
					when("evidenceAt", false),
					str("approvals", SizeReleaseText, false), // [{by, at}], JSON
					when("promotedAt", false),
					str("promotedBy", SizeID, false),
					str("leaseHolder", 128, false),
					when("leaseUntil", false),
					integer("leaseGeneration", false, 0, maxInt),
				},
				Indexes: []Index{
					{Key: "seq", Type: IndexKey, Attributes: []string{"seq"}},
					{Key: "state", Type: IndexKey, Attributes: []string{"state"}},
				},
			},
			{
				// Invitations an admin issued: server only; the document id is a hash of
				// the secret token, which is never stored.
				ID: CollInvitations, Name: "Invitations", DocumentSecurity: true,
				Attributes: []Attribute{
					str("createdBy", SizeID, true),
					when("expiresAt", true),
					str("redeemedBy", SizeID, false),
					when("redeemedAt", false),
				},
			},
		}, runtimeCollections()...),
		Buckets: []Bucket{{
			ID: BucketArtifacts, Name: "Artifacts", FileSecurity: true, Enabled: true,
			MaximumFileSize: MaxArtifactBytes, Compression: "none", Encryption: true, Antivirus: true,
			AllowedFileExtensions: []string{},
		}, uploadsBucket()},
	}
}
