package admit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/redis/go-redis/v9"

	"privateassistant/fault"
	"privateassistant/queue"
	"privateassistant/runconfig"
	"privateassistant/schema"
	"privateassistant/schema/runstate"
)

// Request is a validated admission request.
type Request struct {
	Owner          string
	ConversationID string
	RequestID      string
	Text           string
	Role           string
	// Labels are the caller's Appwrite labels (from the verified JWT): the role's binding
	// says which labels may use it (runconfig.Allowed).
	Labels []string
	// LabelsCarried: Labels were not verified for this admission but carried from another
	// run's record (agent/mcpjobs: the coordinating run's). They decide this admission
	// only and are not kept on the new run, so labels as of one verification never reach
	// further than the runs it admitted directly and their own delegations.
	LabelsCarried bool
	// Attachments are ids of files the caller uploaded to schema.BucketUploads
	// (attachments.go checks them before anything is stored).
	Attachments []string
	// PreviousRunID is the run whose response this one continues (the runtime API's
	// previous_response_id), kept on the run record so the response echoes it.
	PreviousRunID string
	// Metadata is the runtime API's response metadata (JSON, already validated), kept on
	// the run record so the response echoes it.
	Metadata string
	// ParentID is the user message this one follows on its branch (schema.RootParent:
	// none); "" leaves it unset (the previous user message by sequence: schema/branch.go).
	// It is part of the message: a repeat naming another parent is a reused requestId.
	ParentID string
	// RetryOf is the terminal run this one retries (the caller checked it is theirs and of
	// this conversation), kept on the run record.
	RetryOf string
	// Environment is the runtime key's environment ("" is production): the run is
	// planned on that environment's live release (runconfig.Cache.GetIn).
	Environment string
}

// Result names what was admitted.
type Result struct {
	MessageID string `json:"messageId"`
	RunID     string `json:"runId"`
	Sequence  int64  `json:"sequence"`
	Status    string `json:"status"`
	Role      string `json:"role"`
}

// Admitter holds the long-lived parts (one per warm function container).
type Admitter struct {
	RDB        redis.UniversalClient
	Enq        *queue.Enqueuer
	Plans      *runconfig.Cache
	RateLimit  int           // new admissions per window per user (default 30)
	RateWindow time.Duration // default 1 minute
	Now        func() time.Time

	// Hooks for failure-injection tests: called between steps when set.
	AfterWrites func(ctx context.Context, r Result) error

	mu     sync.Mutex
	owners map[string]string   // conversation → owner: immutable, so cacheable in-process
	plans  map[string]planMemo // role → the plan last seen (confirmed by each reservation)
	// lastSeq: conversation → the sequence this container reserved last there, a guess
	// of the next one (+1) to encode the message for ahead of the reservation; never used
	// as a sequence.
	lastSeq map[string]int64
}

func derive(kind, owner, requestID string) string {
	h := sha256.Sum256([]byte(kind + "\x00" + owner + "\x00" + requestID))
	return kind[:1] + hex.EncodeToString(h[:])[:32]
}

// IDs derives the run and message ids of (owner, requestId).
func IDs(owner, requestID string) (runID, messageID string) {
	return derive("run", owner, requestID), derive("msg", owner, requestID)
}

// SnapshotID names the portable context of a conversation through a sequence.
func SnapshotID(conversationID string, through int64) string {
	return derive("snapshot", conversationID, strconv.FormatInt(through, 10))
}

// reserveScript: KEYS conv owner, conv seq, admit, rate, plan pointer (the environment's:
// "=" there follows production's, KEYS[6]), production's plan pointer; ARGV owner, limit,
// window ms, role, the release fingerprint of the plan the caller checked ("" skips the
// check). Returns {code, value}: 0 new seq, 1 repeat seq, -2 foreign, -3 owner unknown,
// -4 rate limited (ms to wait), -5 counter missing, -7 the live release is not the one
// the caller checked. A plan is immutable under its release's fingerprint, so the
// pointer naming that fingerprint is the whole check: a warm admission checks its plan
// and reserves in one round trip, every key passed in KEYS.
var reserveScript = redis.NewScript(`
if ARGV[5] ~= '' then
  local rev = redis.call('GET', KEYS[5])
  if rev == '=' then rev = redis.call('GET', KEYS[6]) end
  if rev ~= ARGV[5] then return {-7, 0} end
end
local o = redis.call('GET', KEYS[1])
if not o then return {-3, 0} end
if o ~= ARGV[1] then return {-2, 0} end
local r = redis.call('GET', KEYS[3])
if r then return {1, tonumber(r)} end
if redis.call('EXISTS', KEYS[2]) == 0 then return {-5, 0} end
local n = redis.call('INCR', KEYS[4])
if n == 1 then redis.call('PEXPIRE', KEYS[4], ARGV[3]) end
if n > tonumber(ARGV[2]) then return {-4, redis.call('PTTL', KEYS[4])} end
local s = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[3], s, 'EX', 604800)
return {0, s}
`)

// releaseScript returns an unused reservation when it is still the counter's top, and
// points the admit key at the sequence actually stored.
var releaseScript = redis.NewScript(`
if tonumber(redis.call('GET', KEYS[1]) or '-1') == tonumber(ARGV[1]) then
  redis.call('DECR', KEYS[1])
end
redis.call('SET', KEYS[2], ARGV[2], 'EX', 604800)
return 1
`)

// Errors of admission that callers may branch on (with errors.Is); the API maps every
// *fault.Error to its envelope. A conversation of another owner is fault.Missing
// ("conversation"), exactly like a missing one.
var (
	// ErrRequestIDReused: the requestId already names a message or run of another
	// conversation or owner.
	ErrRequestIDReused = errors.New("request id reused")
	// ErrNotEnqueued: the run is durable and queued but the task could not be enqueued;
	// the outbox enqueues it when the queue is back.
	ErrNotEnqueued = errors.New("run saved but not enqueued")
	// ErrRoleNotAllowed: the role's binding does not name any of the caller's labels.
	ErrRoleNotAllowed = errors.New("role not allowed")
)

const retryAfter = 2 * time.Second

func redisDown(err error) error {
	return fault.E(fault.Unavailable, "queue_unavailable", "the job queue is unavailable; your message was not accepted, try again", err).Retry(retryAfter)
}

func appwriteErr(err error) error {
	if errors.Is(err, schema.ErrUnavailable) {
		return fault.E(fault.Unavailable, "appwrite_unavailable", "storage is unavailable; try again", err).Retry(retryAfter)
	}
	return err
}

// Admit admits req (see the package comment).
func (a *Admitter) Admit(ctx context.Context, st *schema.Store, req Request) (Result, error) {
	runID, msgID := IDs(req.Owner, req.RequestID)
	res := Result{RunID: runID, MessageID: msgID, Role: req.Role, Status: string(runstate.Initial)}

	p, raw, err := a.plan(ctx, st, req.Environment, req.Role, false)
	if err == nil && raw != "" && !runconfig.Allowed(p.Labels, req.Labels) {
		// A refusal is decided on the current plan, never on the one seen last.
		p, raw, err = a.plan(ctx, st, req.Environment, req.Role, true)
	}
	if err != nil {
		return res, err
	}
	if !runconfig.Allowed(p.Labels, req.Labels) {
		// Refused before the reservation: nothing is stored, no sequence is used.
		return res, roleNotAllowed(req.Role)
	}
	if err := checkAttachments(ctx, st, req.Owner, req.Attachments); err != nil {
		return res, err // refused before the reservation, like a role
	}

	// Admission's own work (encoding its records, schema.Table.Encode) overlaps the round
	// trips it waits for anyway: while the reservation is in flight, the run (it depends
	// on the plan only) and the message for the sequence this container expects (the one
	// after the last it reserved in the conversation); while the message is written, the
	// binding is encoded and written. Encoding is pure: a record encoded for a sequence or
	// plan that turned out otherwise is encoded again; the run is written last, once the
	// message and its bindings are.
	queuedAt := time.Now().UTC().Format(time.RFC3339Nano)
	device, res0 := p.Device, res
	a.mu.Lock()
	res0.Sequence = a.lastSeq[req.ConversationID] + 1
	a.mu.Unlock()
	type early struct {
		msg schema.Encoded[schema.Message]
		run schema.Encoded[schema.Run]
	}
	pre := ahead(func() (early, error) {
		m, err := encodeMessage(st, req, res0)
		if err != nil {
			return early{}, err
		}
		r, err := encodeRun(st, req, res0, queuedAt, device)
		return early{m, r}, err
	})
	runEnc := func() (schema.Encoded[schema.Run], error) { e, err := pre(); return e.run, err }
	for attempt := 0; ; attempt++ {
		seq, _, err := a.reservePlanned(ctx, st, req, runID, &p, &raw)
		if err != nil {
			return res, err
		}
		a.noteSeq(req.ConversationID, seq)
		res.Sequence = seq
		resNow, pNow := res, p
		bindEnc := ahead(func() (schema.Encoded[schema.RunBinding], error) { return encodeBinding(st, req, resNow, pNow) })
		msgEnc := func() (schema.Encoded[schema.Message], error) { e, err := pre(); return e.msg, err }
		if seq != res0.Sequence || attempt > 0 {
			msgEnc = ready(encodeMessage(st, req, res))
		}
		// The binding is written while the message is: it is keyed by the run and names
		// the sequence just reserved, which the message almost always keeps. One that
		// already existed, or whose sequence turned out otherwise, is checked and
		// corrected before the run is written (writeRun); the run is still written last.
		bindW := ahead(func() (bool, error) { return insertBinding(ctx, st, req, resNow, bindEnc) })
		stored, err := a.writeMessage(ctx, st, req, res, msgEnc)
		bound, berr := bindW()
		if errors.Is(err, errSequenceTaken) && attempt < 3 {
			if err := a.resync(ctx, st, req.Owner, req.ConversationID, runID); err != nil {
				return res, err
			}
			continue
		}
		if err != nil {
			return res, err
		}
		if berr != nil {
			return res, berr
		}
		if stored != seq {
			// The message already existed (Redis forgot the reservation): keep its
			// sequence, and give back the one just taken.
			_ = releaseScript.Run(ctx, a.RDB, []string{queue.ConvSeqKey(req.ConversationID), queue.AdmitKey(runID)}, seq, stored).Err()
			res.Sequence = stored
			bindEnc, bound = ready(encodeBinding(st, req, res, p)), false
		}
		if p.Device != device {
			// The plan moved during the reservation.
			runEnc = ready(encodeRun(st, req, res, queuedAt, p.Device))
		}
		if !bound {
			if err := ensureBinding(ctx, st, req, res, bindEnc); err != nil {
				return res, err
			}
		}
		if err := a.writeRun(ctx, st, req, &res, runEnc); err != nil {
			return res, err
		}
		break
	}
	if a.AfterWrites != nil {
		if err := a.AfterWrites(ctx, res); err != nil {
			return res, err
		}
	}
	if schema.IsTerminal(res.Status) {
		return res, nil
	}
	if err := a.Enq.EnqueueRun(ctx, p.Queue, queue.RunTask{RunID: runID, OwnerID: req.Owner, ConversationID: req.ConversationID, Role: req.Role, Attachments: req.Attachments}); err != nil {
		// The run is durable and queued; the outbox enqueues it when Redis is back.
		return res, fault.E(fault.Unavailable, "queue_unavailable",
			"your message was saved but the job queue is unavailable; it will start when the queue is back",
			fmt.Errorf("%w: %w", ErrNotEnqueued, err)).Retry(retryAfter).With("runId", runID).With("messageId", msgID)
	}
	return res, nil
}

var errSequenceTaken = errors.New("sequence already taken")

func (a *Admitter) reserve(ctx context.Context, st *schema.Store, req Request, runID, plan string) (int64, bool, error) {
	limit, window := a.RateLimit, a.RateWindow
	if limit <= 0 {
		limit = 30
	}
	if window <= 0 {
		window = time.Minute
	}
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	win := now().UnixMilli() / window.Milliseconds()
	keys := []string{queue.ConvOwnerKey(req.ConversationID), queue.ConvSeqKey(req.ConversationID), queue.AdmitKey(runID), queue.RateKey(req.Owner, win),
		runconfig.EnvPlanPointerKey(req.Environment), queue.PlanPointerKey()}
	for i := 0; i < 4; i++ {
		vals, err := reserveScript.Run(ctx, a.RDB, keys, req.Owner, limit, window.Milliseconds(), req.Role, plan).Int64Slice()
		if err != nil {
			return 0, false, redisDown(err)
		}
		switch vals[0] {
		case 0:
			return vals[1], false, nil
		case 1:
			return vals[1], true, nil
		case -2:
			return 0, false, fault.Missing("conversation", nil)
		case -3:
			if err := a.learnOwner(ctx, st, req); err != nil {
				return 0, false, err
			}
		case -4:
			return 0, false, fault.Errorf(fault.RateLimited, "rate_limited", "too many messages: at most %d per %s", limit, window).
				Retry(time.Duration(vals[1]) * time.Millisecond)
		case -7:
			return 0, false, errPlanMoved
		case -5:
			max, err := maxSequence(ctx, st, req.Owner, req.ConversationID)
			if err != nil {
				return 0, false, appwriteErr(err)
			}
			if err := a.RDB.SetNX(ctx, queue.ConvSeqKey(req.ConversationID), max, 0).Err(); err != nil {
				return 0, false, redisDown(err)
			}
		}
	}
	return 0, false, errors.New("admission: could not reserve a sequence")
}

// learnOwner verifies the conversation's owner in Appwrite and caches it (an immutable
// fact) in-process and in Redis.
func (a *Admitter) learnOwner(ctx context.Context, st *schema.Store, req Request) error {
	a.mu.Lock()
	owner, ok := a.owners[req.ConversationID]
	a.mu.Unlock()
	if !ok {
		conv, err := schema.For[schema.Conversation](st, schema.CollConversations).Get(ctx, req.ConversationID)
		if errors.Is(err, schema.ErrNotFound) {
			return fault.Missing("conversation", nil)
		}
		if err != nil {
			return appwriteErr(err)
		}
		owner = conv.OwnerID
		a.mu.Lock()
		if a.owners == nil {
			a.owners = map[string]string{}
		}
		if len(a.owners) > 100000 {
			clear(a.owners)
		}
		a.owners[req.ConversationID] = owner
		a.mu.Unlock()
	}
	if owner != req.Owner {
		return fault.Missing("conversation", nil)
	}
	if err := a.RDB.Set(ctx, queue.ConvOwnerKey(req.ConversationID), owner, 0).Err(); err != nil {
		return redisDown(err)
	}
	return nil
}

func maxSequence(ctx context.Context, st *schema.Store, owner, convID string) (int64, error) {
	page, err := schema.For[schema.Message](st, schema.CollMessages).List(ctx, schema.ListQuery{
		Filters: []string{query.Equal("conversationId", convID)},
		Order:   []string{query.OrderDesc("sequence")}, Limit: 1, Owner: owner,
	})
	if err != nil {
		return 0, err
	}
	if len(page.Items) == 0 {
		return 0, nil
	}
	return page.Items[0].Sequence, nil
}

// resync moves the counter up to the stored maximum after a collision and forgets the
// reservation, so the next attempt takes a free sequence.
func (a *Admitter) resync(ctx context.Context, st *schema.Store, owner, convID, runID string) error {
	max, err := maxSequence(ctx, st, owner, convID)
	if err != nil {
		return appwriteErr(err)
	}
	pipe := a.RDB.TxPipeline()
	pipe.Del(ctx, queue.AdmitKey(runID))
	pipe.Eval(ctx, `if tonumber(redis.call('GET', KEYS[1]) or '0') < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end return 1`,
		[]string{queue.ConvSeqKey(convID)}, max)
	if _, err := pipe.Exec(ctx); err != nil {
		return redisDown(err)
	}
	return nil
}

// writeMessage creates the user message; it returns the sequence actually stored.
func (a *Admitter) writeMessage(ctx context.Context, st *schema.Store, req Request, res Result, enc func() (schema.Encoded[schema.Message], error)) (int64, error) {
	msgs := schema.For[schema.Message](st, schema.CollMessages)
	e, err := enc()
	if err != nil {
		return 0, err
	}
	err = msgs.InsertEncoded(ctx, res.MessageID, req.Owner, e)
	if err == nil {
		return res.Sequence, nil
	}
	if !errors.Is(err, schema.ErrConflict) {
		return 0, appwriteErr(err)
	}
	existing, gerr := msgs.Get(ctx, res.MessageID)
	if errors.Is(gerr, schema.ErrNotFound) {
		return 0, errSequenceTaken // another message holds (conversation, sequence)
	}
	if gerr != nil {
		return 0, appwriteErr(gerr)
	}
	if existing.OwnerID != req.Owner || existing.ConversationID != req.ConversationID {
		return 0, fault.E(fault.Conflict, "request_id_reused", "this requestId was already used for another conversation", ErrRequestIDReused)
	}
	if existing.Text == nil || *existing.Text != req.Text || !slices.Equal(existing.Attachments, req.Attachments) ||
		deref(existing.ParentID) != req.ParentID {
		return 0, fault.E(fault.Conflict, "request_id_reused", "this requestId was already used for a different message", ErrRequestIDReused)
	}
	return existing.Sequence, nil
}

// ahead runs f on its own goroutine and returns a function that waits for its result
// (any number of times). f must be pure: it may run in vain when its result is replaced.
func ahead[T any](f func() (T, error)) func() (T, error) {
	done := make(chan struct{})
	var v T
	var err error
	go func() {
		defer close(done)
		v, err = f()
	}()
	return func() (T, error) {
		<-done
		return v, err
	}
}

// ready is ahead's result for a value at hand.
func ready[T any](v T, err error) func() (T, error) {
	return func() (T, error) { return v, err }
}

// encodeMessage encodes the user's message at res.Sequence.
func encodeMessage(st *schema.Store, req Request, res Result) (schema.Encoded[schema.Message], error) {
	return schema.For[schema.Message](st, schema.CollMessages).Encode(&schema.Message{
		OwnerID: req.Owner, ConversationID: req.ConversationID, Sequence: res.Sequence, Role: "user",
		Text: schema.Ptr(req.Text), RunID: schema.Ptr(res.RunID), RequestID: schema.Ptr(req.RequestID),
		Attachments: req.Attachments, ParentID: optional(req.ParentID),
	})
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// noteSeq remembers the sequence reserved last in a conversation (lastSeq).
func (a *Admitter) noteSeq(conv string, seq int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lastSeq == nil || len(a.lastSeq) > 100000 {
		a.lastSeq = map[string]int64{}
	}
	a.lastSeq[conv] = max(a.lastSeq[conv], seq)
}

// encodeBinding encodes the run's bindings: res names the stored sequence, p the plan.
func encodeBinding(st *schema.Store, req Request, res Result, p runconfig.Resolved) (schema.Encoded[schema.RunBinding], error) {
	tools, err := json.Marshal(p.Tools)
	if err != nil {
		return schema.Encoded[schema.RunBinding]{}, err
	}
	return schema.For[schema.RunBinding](st, schema.CollRunBindings).Encode(&schema.RunBinding{
		OwnerID: req.Owner, RunID: res.RunID, ConversationID: req.ConversationID, MessageID: res.MessageID,
		ContextSnapshotID: SnapshotID(req.ConversationID, res.Sequence),
		HarnessProfileID:  p.HarnessProfileID, HarnessRevision: p.HarnessRevision,
		RouteID: p.RouteID, RouteRevision: p.RouteRevision, ToolPolicy: schema.Ptr(string(tools)),
		PlanFingerprint: schema.Ptr(p.Fingerprint), Queue: p.Queue, Attempt: schema.Ptr(int64(0)),
	})
}

// encodeRun encodes the queued run (it depends on the plan's device only).
func encodeRun(st *schema.Store, req Request, res Result, queuedAt, device string) (schema.Encoded[schema.Run], error) {
	return schema.For[schema.Run](st, schema.CollRuns).Encode(&schema.Run{
		OwnerID: req.Owner, ConversationID: req.ConversationID, MessageID: res.MessageID, RequestID: req.RequestID,
		Role: req.Role, Status: runstate.Initial, QueuedAt: queuedAt,
		QueueReason: schema.Ptr("waiting for the " + device + " queue"),
		OwnerLabels: keptLabels(req), PreviousRunID: optional(req.PreviousRunID), Environment: optional(req.Environment),
		Metadata: optional(req.Metadata), RetryOf: optional(req.RetryOf),
	})
}

// insertBinding creates the run's bindings for res's sequence; false when they already
// existed (a repeat, or an attempt that stopped before its run: ensureBinding checks them).
func insertBinding(ctx context.Context, st *schema.Store, req Request, res Result, enc func() (schema.Encoded[schema.RunBinding], error)) (bool, error) {
	b, err := enc()
	if err != nil {
		return false, err
	}
	err = schema.For[schema.RunBinding](st, schema.CollRunBindings).InsertEncoded(ctx, res.RunID, req.Owner, b)
	if errors.Is(err, schema.ErrConflict) {
		return false, nil
	}
	if err != nil {
		return false, appwriteErr(err)
	}
	return true, nil
}

// ensureBinding makes the run's bindings name res's (stored) sequence and conversation:
// created when missing, corrected when an earlier attempt wrote them (while its message
// was being written) for a sequence or conversation its message did not keep.
func ensureBinding(ctx context.Context, st *schema.Store, req Request, res Result, enc func() (schema.Encoded[schema.RunBinding], error)) error {
	created, err := insertBinding(ctx, st, req, res, enc)
	if err != nil || created {
		return err
	}
	bindings := schema.For[schema.RunBinding](st, schema.CollRunBindings)
	b, err := bindings.Get(ctx, res.RunID)
	if err != nil {
		return appwriteErr(err)
	}
	if b.OwnerID != req.Owner {
		return fault.E(fault.Conflict, "request_id_reused", "this requestId was already used", ErrRequestIDReused)
	}
	// The plan they pinned stays (as when an attempt stopped before its run); where and
	// through which message the run's context is, is this message's.
	if want := SnapshotID(req.ConversationID, res.Sequence); b.ContextSnapshotID != want || b.ConversationID != req.ConversationID {
		if _, err := bindings.Update(ctx, res.RunID, map[string]any{"contextSnapshotId": want, "conversationId": req.ConversationID}); err != nil {
			return appwriteErr(err)
		}
	}
	return nil
}

// writeRun writes the run, once its bindings are (a run is never visible without them).
func (a *Admitter) writeRun(ctx context.Context, st *schema.Store, req Request, res *Result,
	runEnc func() (schema.Encoded[schema.Run], error)) error {
	r, err := runEnc()
	if err != nil {
		return err
	}
	runs := schema.For[schema.Run](st, schema.CollRuns)
	err = runs.InsertEncoded(ctx, res.RunID, req.Owner, r)
	if err == nil {
		return nil
	}
	if !errors.Is(err, schema.ErrConflict) {
		return appwriteErr(err)
	}
	// A repeat: report the run as it is now.
	run, gerr := runs.Get(ctx, res.RunID)
	if gerr != nil {
		return appwriteErr(gerr)
	}
	if run.OwnerID != req.Owner {
		return fault.E(fault.Conflict, "request_id_reused", "this requestId was already used", ErrRequestIDReused)
	}
	if run.Role != req.Role {
		return fault.E(fault.Conflict, "request_id_reused", "this requestId was already used with another role", ErrRequestIDReused)
	}
	if deref(run.RetryOf) != req.RetryOf {
		return fault.E(fault.Conflict, "request_id_reused", "this requestId was already used to retry another run", ErrRequestIDReused)
	}
	res.Status = string(run.Status)
	res.Role = run.Role
	return nil
}

// errPlanMoved: the cached plan is no longer the one the admission checked.
var errPlanMoved = errors.New("plan moved")

// planMemo is the last plan seen for a role, as runconfig's cache holds it.
type planMemo struct {
	p   runconfig.Resolved
	raw string // its release fingerprint, compared with the live pointer inside the reservation
}

// plan returns role's plan and its release fingerprint, which the reservation compares
// with the live pointer. Warm, it is the plan last seen, which the reservation confirms
// is still current; fresh reads the cache (runconfig.Cache.GetIn).
func (a *Admitter) plan(ctx context.Context, st *schema.Store, env, role string, fresh bool) (runconfig.Resolved, string, error) {
	a.mu.Lock()
	m, ok := a.plans[env+"\x00"+role]
	a.mu.Unlock()
	if ok && !fresh {
		return m.p, m.raw, nil
	}
	p, _, err := a.Plans.GetIn(ctx, st, env, role)
	if err != nil {
		return p, "", planErr(role, err)
	}
	m = planMemo{p: p, raw: p.ReleaseFingerprint}
	a.mu.Lock()
	if a.plans == nil || len(a.plans) > 1000 {
		a.plans = map[string]planMemo{}
	}
	a.plans[env+"\x00"+role] = m
	a.mu.Unlock()
	return p, m.raw, nil
}

// reservePlanned reserves with the plan checked in the same step. When the plan moved
// (an admin commit, the pointer expired) it reads the plan again, checks the caller
// against it and reserves with that one.
func (a *Admitter) reservePlanned(ctx context.Context, st *schema.Store, req Request, runID string, p *runconfig.Resolved, raw *string) (int64, bool, error) {
	for tries := 0; ; tries++ {
		seq, repeat, err := a.reserve(ctx, st, req, runID, *raw)
		if !errors.Is(err, errPlanMoved) {
			return seq, repeat, err
		}
		if tries > 0 {
			// Moved again right after a fresh read (a promotion racing this admission):
			// the plan just read is this admission's, checked against the caller.
			*raw = ""
			continue
		}
		np, nraw, err := a.plan(ctx, st, req.Environment, req.Role, true)
		if err != nil {
			return 0, false, err
		}
		if !runconfig.Allowed(np.Labels, req.Labels) {
			return 0, false, roleNotAllowed(req.Role)
		}
		*p, *raw = np, nraw
	}
}

// OwnerLabels is what a run record keeps of the caller's labels (schema.Run.OwnerLabels):
// sorted, without duplicates, at most schema.MaxOwnerLabels of at most schema.SizeLabel
// characters (an Appwrite label never exceeds it; a longer one could not be named by a
// role either). Nil when none: a delegation from the run is then refused restricted roles,
// as is one from a run admitted before the field existed.
func OwnerLabels(labels []string) []string {
	var out []string
	for _, l := range labels {
		if l != "" && utf8.RuneCountInString(l) <= schema.SizeLabel {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) > schema.MaxOwnerLabels {
		out = out[:schema.MaxOwnerLabels]
	}
	return out
}

func keptLabels(req Request) []string {
	if req.LabelsCarried {
		return nil
	}
	return OwnerLabels(req.Labels)
}

func roleNotAllowed(role string) error {
	return fault.E(fault.Forbidden, "role_not_allowed", fmt.Sprintf("you may not use the %q role", role), ErrRoleNotAllowed)
}

// planErr turns a plan lookup's failure into the admission's answer.
func planErr(role string, err error) error {
	switch {
	case errors.Is(err, runconfig.ErrUnknownRole):
		return fault.E(fault.Invalid, "invalid_role", fmt.Sprintf("unknown work role %q", role), err)
	case errors.Is(err, runconfig.ErrNotConfigured):
		return fault.E(fault.Unavailable, "not_configured", "the assistant is not configured yet (an operator runs `make bootstrap`)", err)
	case errors.Is(err, runconfig.ErrUnchecked):
		why := strings.TrimPrefix(err.Error(), runconfig.ErrUnchecked.Error()+": ")
		return fault.E(fault.Unavailable, "awaiting_checks", fmt.Sprintf("the %q role is not available until its configuration passes its checks: %s", role, why), err)
	case errors.Is(err, runconfig.ErrUnverified), errors.Is(err, runconfig.ErrDisabled):
		return fault.E(fault.Unavailable, "role_unavailable", fmt.Sprintf("the %q role is not available: %v", role, err), err)
	case errors.Is(err, runconfig.ErrCache):
		return redisDown(err)
	case errors.Is(err, schema.ErrUnavailable):
		return appwriteErr(err)
	}
	return err
}

// optional is nil for "" (an attribute left null), else a pointer to v.
func optional(v string) *string {
	if v == "" {
		return nil
	}
	return &v
}
