package service

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/redis/go-redis/v9"

	"privateassistant/control"
	"privateassistant/fault"
	"privateassistant/functions/httpapi"
	"privateassistant/longpoll"
	"privateassistant/queue"
	"privateassistant/schema"
)

// RunView is a run as its owner sees it. Progress is reported only from real units:
// percent is null unless both completed and total are known.
type RunView struct {
	ID                 string        `json:"id"`
	ConversationID     string        `json:"conversationId"`
	MessageID          string        `json:"messageId"`
	RequestID          string        `json:"requestId"`
	Role               string        `json:"role"`
	Status             string        `json:"status"`
	Terminal           bool          `json:"terminal"`
	Phase              *string       `json:"phase"`
	Progress           *ProgressView `json:"progress"`
	QueueReason        *string       `json:"queueReason"`
	QueuePosition      *int64        `json:"queuePosition"`
	CancelRequested    bool          `json:"cancelRequested"`
	QueuedAt           string        `json:"queuedAt"`
	StartedAt          *string       `json:"startedAt"`
	FinishedAt         *string       `json:"finishedAt"`
	HeartbeatAt        *string       `json:"heartbeatAt"`
	ElapsedMs          *int64        `json:"elapsedMs"`
	LastSequence       int64         `json:"lastSequence"`
	AssistantMessageID *string       `json:"assistantMessageId"`
	Error              *string       `json:"error"`
	Usage              *UsageView    `json:"usage"`
	// RetryOf is the run this one retries (issue 34); absent otherwise.
	RetryOf *string `json:"retryOf,omitempty"`
}

// UsageView is what a run used: tokens, and when the run went through the agent's
// gateway, the model actually served and how many requests it made (the executor copies
// them from the gateway's per-run record when the run ends). Null until the run ends.
type UsageView struct {
	InputTokens  int     `json:"inputTokens"`
	OutputTokens int     `json:"outputTokens"`
	TotalTokens  int     `json:"totalTokens"`
	Model        *string `json:"model"`
	Requests     *int    `json:"requests,omitempty"`
}

// usageView reads the record's usage (JSON written by agent/executor); nil when absent or
// unreadable. Fields beyond these (route alias, device) stay on the server.
func usageView(raw *string) *UsageView {
	if raw == nil {
		return nil
	}
	var u struct {
		UsageView
		Model string `json:"model"`
	}
	if json.Unmarshal([]byte(*raw), &u) != nil {
		return nil
	}
	v := u.UsageView
	if u.Model != "" {
		v.Model = &u.Model
	}
	return &v
}

// ProgressView is completed/total units.
type ProgressView struct {
	Completed int64    `json:"completed"`
	Total     *int64   `json:"total"`
	Percent   *float64 `json:"percent"`
}

func runView(r *schema.Run, now time.Time) RunView {
	v := RunView{ID: r.ID, ConversationID: r.ConversationID, MessageID: r.MessageID, RequestID: r.RequestID,
		Role: r.Role, Status: string(r.Status), Terminal: schema.IsTerminal(r.Status), Phase: r.Phase,
		QueueReason: r.QueueReason, QueuePosition: r.QueuePosition, CancelRequested: r.CancelRequested,
		QueuedAt: r.QueuedAt, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, HeartbeatAt: r.HeartbeatAt,
		AssistantMessageID: r.AssistantMessageID, Error: r.ErrorSummary, Usage: usageView(r.Usage), RetryOf: r.RetryOf}
	if r.LastSequence != nil {
		v.LastSequence = *r.LastSequence
	}
	if r.ProgressCompleted != nil {
		v.Progress = &ProgressView{Completed: *r.ProgressCompleted, Total: r.ProgressTotal}
		if r.ProgressTotal != nil && *r.ProgressTotal > 0 {
			pct := float64(*r.ProgressCompleted) / float64(*r.ProgressTotal) * 100
			v.Progress.Percent = &pct
		}
	}
	if r.StartedAt != nil {
		if start, err := time.Parse(time.RFC3339Nano, *r.StartedAt); err == nil {
			end := now
			if r.FinishedAt != nil {
				if f, err := time.Parse(time.RFC3339Nano, *r.FinishedAt); err == nil {
					end = f
				}
			}
			ms := end.Sub(start).Milliseconds()
			v.ElapsedMs = &ms
		}
	}
	return v
}

// runFacts are a run's immutable facts the followers check: its owner and conversation.
type runFacts struct{ owner, conv string }

func (s *Service) rememberRunOwner(runID, owner, conv string) {
	s.mu.Lock()
	if len(s.runOwners) > 100000 {
		clear(s.runOwners)
	}
	s.runOwners[runID] = runFacts{owner, conv}
	s.mu.Unlock()
}

// checkRunOwner verifies the caller owns runID, and that its conversation is not deleted,
// using cached immutable facts (process, then Redis: "<owner> <conversation>") before
// falling back to the record. Foreign, missing and a deleted conversation's are all 404.
// Only followers call it: it uses their pool, not the one admission uses.
func (s *Service) checkRunOwner(ctx context.Context, st *schema.Store, owner, runID string) error {
	s.mu.Lock()
	f, ok := s.runOwners[runID]
	s.mu.Unlock()
	rdb := s.follow.Client()
	if !ok {
		// A value without a conversation (written before issue 30) is read again.
		if v, err := rdb.Get(ctx, queue.RunOwnerKey(runID)).Result(); err == nil {
			if o, conv, found := strings.Cut(v, " "); found && o != "" && conv != "" {
				f, ok = runFacts{o, conv}, true
			}
		}
	}
	if !ok {
		run, err := schema.For[schema.Run](st, schema.CollRuns).Get(ctx, runID)
		if err != nil {
			return storeErr(err, "run")
		}
		f = runFacts{run.OwnerID, run.ConversationID}
		_ = rdb.Set(ctx, queue.RunOwnerKey(runID), f.owner+" "+f.conv, 30*24*time.Hour).Err()
	}
	s.rememberRunOwner(runID, f.owner, f.conv)
	if f.owner != owner {
		return fault.Missing("run", nil)
	}
	return runOfLiveConversation(ctx, st, rdb, owner, f.conv)
}

// liveRun reads the caller's run (404 when foreign, missing or of a deleted conversation).
func (s *Service) liveRun(ctx context.Context, st *schema.Store, owner, runID string) (*schema.Run, error) {
	run, err := schema.For[schema.Run](st, schema.CollRuns).GetOwned(ctx, owner, runID)
	if err != nil {
		return nil, storeErr(err, "run")
	}
	if err := runOfLiveConversation(ctx, st, s.rdb, owner, run.ConversationID); err != nil {
		return nil, err
	}
	return run, nil
}

// RunRecord is GET /api/runs/{id}'s answer, read only (the stream service serves it as
// GET /stream/runs/{id}): the owner's run, a foreign one or one of a deleted conversation
// missing.
func RunRecord(ctx context.Context, st *schema.Store, rdb redis.Cmdable, owner, runID string) (RunView, error) {
	run, err := schema.For[schema.Run](st, schema.CollRuns).GetOwned(ctx, owner, runID)
	if err != nil {
		return RunView{}, storeErr(err, "run")
	}
	if err := runOfLiveConversation(ctx, st, rdb, owner, run.ConversationID); err != nil {
		return RunView{}, err
	}
	return runView(run, time.Now()), nil
}

func (s *Service) controller() *control.Controller {
	return &control.Controller{RDB: s.rdb, Inspector: s.inspector}
}

func (s *Service) runRoutes(a *httpapi.API) {
	a.Handle("GET /api/runs", httpapi.Route{}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		cursor, limit, err := pageParams(r)
		if err != nil {
			return err
		}
		// Newest first by admission time (the index runs.owner_queued); never $sequence, a
		// UUIDv7 ordered only to the millisecond on MongoDB.
		q := schema.ListQuery{Owner: c.User.ID, Order: []string{query.OrderDesc("queuedAt")}, Cursor: cursor, Limit: limit}
		if st := r.URL.Query().Get("status"); st != "" {
			if !slices.Contains(schema.RunStatuses, schema.RunStatus(st)) {
				return fault.Invalidf("invalid_status", "unknown status %q", st)
			}
			q.Filters = append(q.Filters, query.Equal("status", st))
		}
		if conv := r.URL.Query().Get("conversationId"); conv != "" {
			if !queue.ValidID(conv) {
				return fault.Invalidf("invalid_id", "conversationId is not a valid id")
			}
			q.Filters = append(q.Filters, query.Equal("conversationId", conv))
		}
		st, err := s.store(c)
		if err != nil {
			return err
		}
		if cursor != "" {
			// A cursor must be a run the caller may see (one of a deleted conversation is not).
			if _, err := s.liveRun(r.Context(), st, c.User.ID, cursor); err != nil {
				if fault.KindOf(err) == fault.NotFound {
					return errInvalidCursor()
				}
				return err
			}
		}
		page, err := schema.For[schema.Run](st, schema.CollRuns).List(r.Context(), q)
		if err != nil {
			return storeErr(err, "run")
		}
		// A deleted conversation's runs are not listed, as if they were another user's.
		if page.Items, err = visibleRuns(r.Context(), st, s.rdb, c.User.ID, page.Items); err != nil {
			return err
		}
		if conv := r.URL.Query().Get("conversationId"); conv != "" && len(page.Items) == 0 {
			page.Next = ""
		}
		now := time.Now()
		out := make([]RunView, 0, len(page.Items))
		for i := range page.Items {
			out = append(out, runView(&page.Items[i], now))
		}
		httpapi.WriteJSON(w, 200, map[string]any{"runs": out, "next": page.Next})
		return nil
	})

	a.Handle("GET /api/runs/{id}", httpapi.Route{}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		id, err := pathID(r, "id")
		if err != nil {
			return err
		}
		st, err := s.store(c)
		if err != nil {
			return err
		}
		run, err := s.liveRun(r.Context(), st, c.User.ID, id)
		if err != nil {
			return err
		}
		httpapi.WriteJSON(w, 200, runView(run, time.Now()))
		return nil
	})

	a.Handle("GET /api/runs/{id}/events", httpapi.Route{}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		id, err := pathID(r, "id")
		if err != nil {
			return err
		}
		after, wait, err := pollQuery(r.URL.Query(), 0)
		if err != nil {
			return err
		}
		st, err := s.store(c)
		if err != nil {
			return err
		}
		if err := s.checkRunOwner(r.Context(), st, c.User.ID, id); err != nil {
			return err
		}
		wait, release := s.pollWait(r.Context(), wait)
		defer release()
		p := &longpoll.Poller{Hub: s.follow, Coalesce: s.cfg.Coalesce}
		b, err := p.Poll(r.Context(), st, longpoll.Run{ID: id, Owner: c.User.ID}, after, wait)
		if errors.Is(err, longpoll.ErrRedis) {
			return &fault.Error{Kind: fault.Unavailable, Code: "events_unavailable", Message: "live events are unavailable; retry", RetryAfter: 2 * time.Second}
		}
		if err != nil {
			return storeErr(err, "run")
		}
		httpapi.WriteJSON(w, 200, b)
		return nil
	})

	a.Handle("POST /api/runs/{id}/cancel", httpapi.Route{MaxBody: 1 << 10}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		id, err := pathID(r, "id")
		if err != nil {
			return err
		}
		st, err := s.store(c)
		if err != nil {
			return err
		}
		if _, err := s.liveRun(r.Context(), st, c.User.ID, id); err != nil {
			return err
		}
		res, err := s.controller().Cancel(r.Context(), st, c.User.ID, id)
		if err != nil {
			return storeErr(err, "run")
		}
		httpapi.WriteJSON(w, 202, res)
		return nil
	})

	a.Handle("POST /api/runs/{id}/approval", httpapi.Route{MaxBody: 2 << 10}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		id, err := pathID(r, "id")
		if err != nil {
			return err
		}
		var body struct {
			RequestID string `json:"requestId"`
			Choice    string `json:"choice"`
		}
		if err := httpapi.DecodeJSON(r, &body); err != nil {
			return err
		}
		if body.RequestID == "" || len(body.RequestID) > 256 {
			return fault.Invalidf("invalid_request_id", "requestId must be the pending approval's id")
		}
		if !slices.Contains(control.Choices, body.Choice) {
			return fault.Invalidf("invalid_choice", "choice must be once or deny")
		}
		st, err := s.store(c)
		if err != nil {
			return err
		}
		if _, err := s.liveRun(r.Context(), st, c.User.ID, id); err != nil {
			return err
		}
		if err := s.controller().Approve(r.Context(), st, c.User.ID, id, body.RequestID, body.Choice); err != nil {
			return storeErr(err, "run")
		}
		httpapi.WriteJSON(w, 202, map[string]any{"runId": id, "requestId": body.RequestID, "choice": body.Choice, "accepted": true})
		return nil
	})
}

// ownedByPath reads the record the {id} path value names, owner-checked (a record of
// another user reads as not found).
func ownedByPath[T any](s *Service, r *http.Request, c *httpapi.Call, coll, kind string) (*T, error) {
	id, err := pathID(r, "id")
	if err != nil {
		return nil, err
	}
	st, err := s.store(c)
	if err != nil {
		return nil, err
	}
	rec, err := schema.For[T](st, coll).GetOwned(r.Context(), c.User.ID, id)
	if err != nil {
		return nil, storeErr(err, kind)
	}
	return rec, nil
}

// pollQuery reads a long-poll's query: after (a non-negative sequence; dflt when absent)
// and wait (0-25 seconds). GET /api/runs/{id}/events, the change feed and the runtime
// API's events share it.
//
// ParseAfter is its after half, for the stream service.
func ParseAfter(q url.Values, dflt int64) (int64, error) {
	after, _, err := pollQuery(url.Values{"after": q["after"]}, dflt)
	return after, err
}

func pollQuery(q url.Values, dflt int64) (after int64, wait time.Duration, err error) {
	after = dflt
	if v := q.Get("after"); v != "" {
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || n < 0 {
			return 0, 0, fault.Invalidf("invalid_after", "after must be a non-negative integer")
		}
		after = n
	}
	if v := q.Get("wait"); v != "" {
		secs, perr := strconv.ParseFloat(v, 64)
		if perr != nil || secs < 0 || secs > 25 {
			return 0, 0, fault.Invalidf("invalid_wait", "wait must be between 0 and 25 seconds")
		}
		wait = time.Duration(secs * float64(time.Second))
	}
	return after, wait, nil
}
