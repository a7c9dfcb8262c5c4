package schema

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// Meta holds the system fields every document carries. Embedded in each record; the
// store never sends them as data.
type Meta struct {
	ID          string   `json:"$id,omitempty"`
	Sequence    int64    `json:"$sequence,omitempty"`
	CreatedAt   string   `json:"$createdAt,omitempty"`
	UpdatedAt   string   `json:"$updatedAt,omitempty"`
	Permissions []string `json:"$permissions,omitempty"`
}

// DocID returns the document id.
func (m Meta) DocID() string { return m.ID }

// Conversation is a chat thread owned by one user.
type Conversation struct {
	Meta
	OwnerID        string `json:"ownerId"`
	Title          string `json:"title"`
	LastActivityAt string `json:"lastActivityAt"`
}

// Message is one persisted turn of a conversation.
type Message struct {
	Meta
	OwnerID        string  `json:"ownerId"`
	ConversationID string  `json:"conversationId"`
	Sequence       int64   `json:"sequence"`
	Role           string  `json:"role"`
	Text           *string `json:"text"`
	TextFileID     *string `json:"textFileId"`
	RunID          *string `json:"runId"`
	RequestID      *string `json:"requestId"`
	// SequenceKey is SequenceKey(ConversationID, Sequence); Table.Create sets it.
	SequenceKey *string `json:"sequenceKey"`
	// Attachments are ids of files in BucketUploads (user messages only; omitted when none,
	// so deployments without the attribute keep working).
	Attachments []string `json:"attachments,omitempty"`
	// ParentID is the user message this one follows on its branch (RootParent: none, a new
	// first message); nil: the previous user message by sequence (branch.go).
	ParentID *string `json:"parentId,omitempty"`
}

// SequenceKey is the string key that makes a message's (conversation, sequence) unique on
// every engine: a unique index over it is a unique index over one string attribute, which
// MongoDB enforces (it enforces none with an integer in it). Lower-case, because MariaDB
// compares strings case-insensitively.
func SequenceKey(conversationID string, sequence int64) string {
	return strings.ToLower(conversationID) + "." + strconv.FormatInt(sequence, 10)
}

// Run is an accepted job, as its owner sees it.
type Run struct {
	Meta
	OwnerID           string    `json:"ownerId"`
	ConversationID    string    `json:"conversationId"`
	MessageID         string    `json:"messageId"`
	RequestID         string    `json:"requestId"`
	Role              string    `json:"role"`
	Status            RunStatus `json:"status"`
	Phase             *string   `json:"phase"`
	ProgressCompleted *int64    `json:"progressCompleted"`
	ProgressTotal     *int64    `json:"progressTotal"`
	QueueReason       *string   `json:"queueReason"`
	QueuePosition     *int64    `json:"queuePosition"`
	// Checkpoint is the work folder's checkpoint taken before the run's last pause:
	// "p<n> sha256:<hex>" (agent/executor/checkpoint.go).
	Checkpoint         *string `json:"checkpoint"`
	CancelRequested    bool    `json:"cancelRequested"`
	QueuedAt           string  `json:"queuedAt"`
	StartedAt          *string `json:"startedAt"`
	FinishedAt         *string `json:"finishedAt"`
	HeartbeatAt        *string `json:"heartbeatAt"`
	LastSequence       *int64  `json:"lastSequence"`
	AssistantMessageID *string `json:"assistantMessageId"`
	ErrorSummary       *string `json:"errorSummary"`
	Usage              *string `json:"usage"`
	Version            *int64  `json:"version"` // nil: written before issue 12 (version 0)
	// OwnerLabels are the owner's Appwrite labels as admission verified them (the web's
	// JWT, the runtime API's app user), at most MaxOwnerLabels of SizeLabel characters:
	// a job this run enqueues (agent/mcpjobs) is admitted with them, since the agent
	// cannot read users. Nil on runs admitted before issue 19 and for owners with no
	// labels: a role restricted to labels is refused to their delegations.
	OwnerLabels []string `json:"ownerLabels,omitempty"`
	// PreviousRunID is the run whose response this one continues through the runtime API
	// (POST /api/v1/responses with previous_response_id): GET echoes it. Nil otherwise,
	// and on runs admitted before it was kept.
	PreviousRunID *string `json:"previousRunId,omitempty"`
	// RetryOf is the terminal run this one retries (POST messages' retryOf); nil otherwise.
	RetryOf *string `json:"retryOf,omitempty"`
	// Metadata is the runtime API's response metadata as the app sent it (a JSON object
	// of at most 16 string pairs, runtimeapi.ParseMetadata): GET echoes it. Nil otherwise.
	Metadata *string `json:"metadata,omitempty"`
	// Environment is the runtime key's environment the run was admitted in (admit.Request.
	// Environment; nil: production): a job the run delegates (agent/mcpjobs) is admitted
	// in it, so a staging run's jobs run staging's release.
	Environment *string `json:"environment,omitempty"`
}

// VersionClaim is the claim of one version of a versioned record (a run record, the
// settings). Server only.
type VersionClaim struct {
	Meta
	Target  string `json:"target"` // "<collection>/<record id>"
	Version int64  `json:"version"`
	Patch   string `json:"patch"` // the version's patch, JSON
}

// VersionDocID is the document id of the claim of version v of record id in collection
// coll: deterministic and lower-case (a hash), so exactly one create of it succeeds on
// every engine.
func VersionDocID(coll, id string, v int64) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s/%s/%d", coll, strings.ToLower(id), v)))
	return "v" + hex.EncodeToString(h[:])[:35]
}

// Event is a durable, user-safe, normalized run event.
type Event struct {
	Meta
	OwnerID  string  `json:"ownerId"`
	RunID    string  `json:"runId"`
	Sequence int64   `json:"sequence"`
	Type     string  `json:"type"`
	Data     *string `json:"data"`
	// DataFileID holds the file Data was too long for the record to hold; reads through
	// a Table fill Data from it.
	DataFileID *string `json:"dataFileId"`
}

// Artifact is the metadata of a file a run produced.
type Artifact struct {
	Meta
	OwnerID        string `json:"ownerId"`
	ConversationID string `json:"conversationId"`
	RunID          string `json:"runId"`
	Filename       string `json:"filename"`
	MimeType       string `json:"mimeType"`
	Size           int64  `json:"size"`
	Checksum       string `json:"checksum"`
	BucketID       string `json:"bucketId"`
	FileID         string `json:"fileId"`
}

// ContextSnapshot is an immutable portable task context (no credentials). Server only.
type ContextSnapshot struct {
	Meta
	OwnerID         string  `json:"ownerId"`
	ConversationID  string  `json:"conversationId"`
	ThroughSequence int64   `json:"throughSequence"`
	Context         *string `json:"context"`
	ContextFileID   *string `json:"contextFileId"`
	Checksum        string  `json:"checksum"`
}

// HarnessProfile is one immutable revision of a harness registration. Server only.
type HarnessProfile struct {
	Meta
	ProfileID     string  `json:"profileId"`
	Revision      int64   `json:"revision"`
	Kind          string  `json:"kind"`
	BaseURL       string  `json:"baseUrl"`
	ProfileName   *string `json:"profileName"`
	KeyRef        *string `json:"keyRef"`
	Capabilities  *string `json:"capabilities"`
	Verified      bool    `json:"verified"`
	VerifiedAt    *string `json:"verifiedAt"`
	HermesVersion *string `json:"hermesVersion"`
	// HermesCommit is the commit the validated Hermes was built from, or "unknown: <why>"
	// (hermes.Build.CommitOrReason).
	HermesCommit *string `json:"hermesCommit"`
	// ValidationRequestedAt: an admin asked for validation; the agent, which holds the
	// key, probes the harness, writes the result and clears it.
	ValidationRequestedAt *string `json:"validationRequestedAt"`
	// CheckFailedAt, CheckFailure: a later validation of this verified revision failed.
	// It stays verified (the roles bound to it keep serving: an alert is raised if it is
	// live) and no role may be newly bound to it until a validation passes again.
	CheckFailedAt *string `json:"checkFailedAt"`
	CheckFailure  *string `json:"checkFailure"`
	CreatedBy     *string `json:"createdBy"`
}

// ModelRoute is one immutable revision of a route alias. Server only.
type ModelRoute struct {
	Meta
	RouteID       string  `json:"routeId"`
	Revision      int64   `json:"revision"`
	Alias         string  `json:"alias"`
	Device        string  `json:"device"`
	BackendModel  string  `json:"backendModel"`
	ContextBudget int64   `json:"contextBudget"`
	MaxOutput     *int64  `json:"maxOutput"`
	LocalOnly     bool    `json:"localOnly"`
	Enabled       bool    `json:"enabled"`
	CreatedBy     *string `json:"createdBy"`
	// Qualification is the GPU qualification recorded on this revision (JSON,
	// runconfig.Qualification); nil when the route was never qualified.
	Qualification *string `json:"qualification"`
}

// Settings is one owner's (or the system's) revision-guarded settings. Server only.
type Settings struct {
	Meta
	OwnerID                string  `json:"ownerId"`
	Revision               int64   `json:"revision"`
	DefaultHarness         *string `json:"defaultHarness"`
	DefaultHarnessRevision *int64  `json:"defaultHarnessRevision"`
	Roles                  *string `json:"roles"`
	ToolCeiling            *string `json:"toolCeiling"`
	LastChange             *string `json:"lastChange"`
	Release                *string `json:"release"` // the system document: the live release's id
}

// Release states: the reconciler is collecting the candidate's evidence; the evidence
// passed (it may be promoted); the evidence failed.
const (
	ReleaseCollecting = "collecting"
	ReleaseReady      = "ready"
	ReleaseFailed     = "failed"
)

// ReleaseStates are the values of Release.State.
var ReleaseStates = []string{ReleaseCollecting, ReleaseReady, ReleaseFailed}

// Release is one configuration candidate: an immutable snapshot of the desired-state head
// (Content, Fingerprint) with its plan, the evidence the reconciler collected and the
// approvals. It is a release once promoted (PromotedAt). Server only.
type Release struct {
	Meta
	Seq             int64   `json:"seq"`
	Revision        int64   `json:"revision"`
	BasedOn         int64   `json:"basedOn"`
	State           string  `json:"state"`
	Fingerprint     string  `json:"fingerprint"`
	Content         string  `json:"content"`
	Plan            *string `json:"plan"`
	CreatedBy       string  `json:"createdBy"`
	CreatedAt       string  `json:"createdAt"`
	Evidence        *string `json:"evidence"`
	EvidenceAt      *string `json:"evidenceAt"`
	Approvals       *string `json:"approvals"`
	PromotedAt      *string `json:"promotedAt"`
	PromotedBy      *string `json:"promotedBy"`
	LeaseHolder     *string `json:"leaseHolder"`
	LeaseUntil      *string `json:"leaseUntil"`
	LeaseGeneration *int64  `json:"leaseGeneration"`
}

// GPUStatus is the last observed state of one device. Server only.
type GPUStatus struct {
	Meta
	Device           string   `json:"device"`
	Host             string   `json:"host"`
	State            string   `json:"state"`
	LoadedModel      *string  `json:"loadedModel"`
	ActiveModel      *string  `json:"activeModel"`
	MemoryUsedBytes  *int64   `json:"memoryUsedBytes"`
	MemoryTotalBytes *int64   `json:"memoryTotalBytes"`
	TemperatureC     *float64 `json:"temperatureC"`
	PowerW           *float64 `json:"powerW"`
	LeaseHolder      *string  `json:"leaseHolder"`
	LeaseGeneration  *int64   `json:"leaseGeneration"`
	QueueDepth       *int64   `json:"queueDepth"`
	HeartbeatAt      string   `json:"heartbeatAt"`
}

// RunBinding is what a run was pinned to at admission, and the native ids and attempt
// token of its execution. Server only.
type RunBinding struct {
	Meta
	OwnerID           string  `json:"ownerId"`
	RunID             string  `json:"runId"`
	ConversationID    string  `json:"conversationId"`
	MessageID         string  `json:"messageId"`
	ContextSnapshotID string  `json:"contextSnapshotId"`
	HarnessProfileID  string  `json:"harnessProfileId"`
	HarnessRevision   int64   `json:"harnessRevision"`
	RouteID           string  `json:"routeId"`
	RouteRevision     int64   `json:"routeRevision"`
	ToolPolicy        *string `json:"toolPolicy"`
	PlanFingerprint   *string `json:"planFingerprint"`
	Queue             string  `json:"queue"`
	NativeSessionID   *string `json:"nativeSessionId"`
	NativeRunID       *string `json:"nativeRunId"`
	Attempt           *int64  `json:"attempt"`
	AttemptToken      *string `json:"attemptToken"`
	PendingApprovalID *string `json:"pendingApprovalId"`
	// HarnessCheck is the harness's build (version, commit or why it is unknown) and
	// capability output as checked before the run's latest submission (JSON,
	// harness.Check).
	HarnessCheck *string `json:"harnessCheck"`
}

// Audit records who changed what, when, from which revision to which. Server only.
type Audit struct {
	Meta
	ActorID      string  `json:"actorId"`
	Action       string  `json:"action"`
	Target       string  `json:"target"`
	FromRevision *int64  `json:"fromRevision"`
	ToRevision   *int64  `json:"toRevision"`
	Detail       *string `json:"detail"`
	At           string  `json:"at"`
}

// Invitation is a single-use invitation an admin issued. Server only. Its document id is
// derived from the token (the token itself is never stored); redeeming it creates the
// user whose id is derived from the invitation id, so it is consumed exactly once.
type Invitation struct {
	Meta
	CreatedBy  string  `json:"createdBy"`
	ExpiresAt  string  `json:"expiresAt"`
	RedeemedBy *string `json:"redeemedBy"`
	RedeemedAt *string `json:"redeemedAt"`
}

// Ptr returns a pointer to v, for the optional fields above.
func Ptr[T any](v T) *T { return &v }

// EventDocID is the document id of a run's event: deterministic, so a replayed write of
// the same event is a conflict instead of a duplicate.
func EventDocID(runID string, seq int64) string {
	p := runID
	if len(p) > 22 {
		p = p[:22]
	}
	// Lower-case: ids are case-insensitive on every real engine.
	return strings.ToLower(fmt.Sprintf("%s.e%d", p, seq))
}
