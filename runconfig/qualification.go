package runconfig

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/appwrite/sdk-for-go/query"

	"privateassistant/schema"
)

// Qualification is the measured result of qualifying a route on its device (agent/gpu
// Qualify): the model loaded at the route's context budget and stressed (the KV cache
// filled to the budget, a sustained generation at the route's maximum output, concurrent
// requests up to the device's slots). It is recorded on a new revision of the route
// (model_routes.qualification) and the selection gate needs a passing one for the
// route's current device, backend model and context budget.
type Qualification struct {
	// What was qualified: the route and revision it was asked for, and what the gate
	// compares with the revision it is recorded on.
	Route         string `json:"route"`
	RouteRevision int64  `json:"routeRevision"`
	Device        string `json:"device"`
	Model         string `json:"model"`
	ContextBudget int64  `json:"contextBudget"`
	MaxOutput     int64  `json:"maxOutput,omitempty"`
	Backend       string `json:"backend,omitempty"` // the device's backend kind
	StartedAt     string `json:"startedAt"`
	FinishedAt    string `json:"finishedAt"`
	// WaitedSeconds: how long it queued behind users' jobs before it ran.
	WaitedSeconds float64 `json:"waitedSeconds"`

	Passed  bool     `json:"passed"`
	Reasons []string `json:"reasons,omitempty"` // each limit it failed, in words

	// Measured.
	ContextServed  int64   `json:"contextServed"`            // per request, as the backend reports it
	ContextTrained int64   `json:"contextTrained,omitempty"` // the model's training context when reported
	ContextSource  string  `json:"contextSource,omitempty"`
	FilledTokens   int64   `json:"filledTokens"` // prompt tokens of the request that filled the KV cache
	Concurrency    int     `json:"concurrency"`  // concurrent requests run (the device's slots)
	VRAMIdleBytes  int64   `json:"vramIdleBytes,omitempty"`
	VRAMFullBytes  int64   `json:"vramFullBytes,omitempty"` // peak used under stress
	VRAMAfterBytes int64   `json:"vramAfterBytes,omitempty"`
	VRAMTotalBytes int64   `json:"vramTotalBytes,omitempty"`
	PromptTPS      float64 `json:"promptTokensPerSecond"`
	GenerationTPS  float64 `json:"generationTokensPerSecond"`
	ConcurrentTPS  float64 `json:"concurrentTokensPerSecond,omitempty"` // generation, all slots together
	PeakTempC      float64 `json:"peakTemperatureC,omitempty"`          // 0: not reported
	PeakPowerW     float64 `json:"peakPowerW,omitempty"`                // 0: not reported

	// The limits it was judged against (the GPU config's qualify block).
	Limits QualificationLimits `json:"limits"`
}

// QualificationLimits are the pass/fail bounds (0: not checked).
type QualificationLimits struct {
	MaxTemperatureC      float64 `json:"maxTemperatureC,omitempty"`
	MinFreeMemoryBytes   int64   `json:"minFreeMemoryBytes,omitempty"`
	MinPromptTPS         float64 `json:"minPromptTokensPerSecond,omitempty"`
	MinGenerationTPS     float64 `json:"minGenerationTokensPerSecond,omitempty"`
	MemoryBackToleranceB int64   `json:"memoryBackToleranceBytes,omitempty"`
}

// ErrUnqualified: the route revision has no passing qualification for what it serves.
var ErrUnqualified = errors.New("route is not qualified")

// RouteQualification reads the qualification recorded on a route revision (nil: none).
func RouteQualification(r *schema.ModelRoute) (*Qualification, error) {
	if r == nil || r.Qualification == nil || *r.Qualification == "" {
		return nil, nil
	}
	var q Qualification
	if err := json.Unmarshal([]byte(*r.Qualification), &q); err != nil {
		return nil, fmt.Errorf("route %s revision %d: unreadable qualification: %w", r.RouteID, r.Revision, err)
	}
	return &q, nil
}

// CheckQualified returns nil when the route revision carries a passing qualification
// for its current device, backend model and context budget; otherwise an error wrapping
// ErrUnqualified that says why (never qualified, failed and on which limits, or made for
// another model or budget).
func CheckQualified(r *schema.ModelRoute) error {
	q, err := RouteQualification(r)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnqualified, err)
	}
	if q == nil {
		return fmt.Errorf("%w: route %s revision %d has never been qualified on %s (pa admin gpu qualify %s)", ErrUnqualified, r.RouteID, r.Revision, r.Device, r.RouteID)
	}
	switch {
	case q.Device != r.Device || q.Model != r.BackendModel || q.ContextBudget != r.ContextBudget:
		return fmt.Errorf("%w: route %s revision %d's last qualification was for %s on %s at %d tokens, not %s on %s at %d; qualify it again",
			ErrUnqualified, r.RouteID, r.Revision, q.Model, q.Device, q.ContextBudget, r.BackendModel, r.Device, r.ContextBudget)
	case !q.Passed:
		why := "it failed"
		if len(q.Reasons) > 0 {
			why = strings.Join(q.Reasons, "; ")
		}
		return fmt.Errorf("%w: route %s revision %d failed its qualification at %s: %s", ErrUnqualified, r.RouteID, r.Revision, q.FinishedAt, why)
	}
	return nil
}

// Summary is the one-line description of a qualification shown by /api/system.
func (q *Qualification) Summary() string {
	if q == nil {
		return "never qualified"
	}
	if !q.Passed {
		return "failed: " + strings.Join(q.Reasons, "; ")
	}
	s := fmt.Sprintf("passed: %d tokens of context served, %.0f prompt and %.1f generation tokens/s", q.ContextServed, q.PromptTPS, q.GenerationTPS)
	if q.VRAMTotalBytes > 0 {
		s += fmt.Sprintf(", %d of %d MiB used at full context", q.VRAMFullBytes>>20, q.VRAMTotalBytes>>20)
	}
	if q.PeakTempC > 0 {
		s += fmt.Sprintf(", peak %.0f °C", q.PeakTempC)
	}
	return s
}

// LatestRoute returns a route's newest revision (schema.ErrNotFound when there is none).
func LatestRoute(ctx context.Context, st *schema.Store, id string) (*schema.ModelRoute, error) {
	p, err := schema.For[schema.ModelRoute](st, schema.CollModelRoutes).List(ctx, schema.ListQuery{
		Filters: []string{query.Equal("routeId", id)}, Order: []string{query.OrderDesc("revision")}, Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(p.Items) == 0 {
		return nil, fmt.Errorf("route %s: %w", id, schema.ErrNotFound)
	}
	return &p.Items[0], nil
}

// ErrRouteChanged: the route's device, model or budget changed while it was qualified, so
// the result describes something the route no longer serves and is not recorded.
var ErrRouteChanged = errors.New("the route changed while it was qualified")

// RecordQualification writes q on a new revision of its route: the latest revision's
// fields unchanged, with the qualification (pass or fail). It refuses (ErrRouteChanged)
// when the latest revision no longer serves q's device, model and budget, and retries
// when an admin commits a revision at the same moment. The audit log gets the entry.
func RecordQualification(ctx context.Context, st *schema.Store, actor string, q Qualification) (*schema.ModelRoute, error) {
	body, err := json.Marshal(q)
	if err != nil {
		return nil, err
	}
	if len(body) > schema.SizeJSONSmall {
		q.Reasons = []string{strings.Join(q.Reasons, "; ")[:min(len(strings.Join(q.Reasons, "; ")), 512)]}
		if body, err = json.Marshal(q); err != nil {
			return nil, err
		}
	}
	doc := string(body)
	for try := 0; ; try++ {
		cur, err := LatestRoute(ctx, st, q.Route)
		if err != nil {
			return nil, err
		}
		if cur.Device != q.Device || cur.BackendModel != q.Model || cur.ContextBudget != q.ContextBudget {
			return nil, fmt.Errorf("%w: it now serves %s on %s at %d tokens (revision %d); qualify it again",
				ErrRouteChanged, cur.BackendModel, cur.Device, cur.ContextBudget, cur.Revision)
		}
		next := *cur
		next.Meta = schema.Meta{}
		next.Revision, next.Qualification, next.CreatedBy = cur.Revision+1, &doc, schema.Ptr(actor)
		got, err := schema.For[schema.ModelRoute](st, schema.CollModelRoutes).Create(ctx, RevisionDocID(q.Route, next.Revision), "", &next)
		if errors.Is(err, schema.ErrConflict) && try < 4 {
			continue // an admin committed a revision meanwhile: re-read and record on top of it
		}
		if err != nil {
			return nil, err
		}
		verdict := "passed"
		if !q.Passed {
			verdict = "failed: " + strings.Join(q.Reasons, "; ")
		}
		target := "route/" + q.Route
		h := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d", target, next.Revision))) // settings.AuditID
		_, aerr := schema.For[schema.Audit](st, schema.CollAudit).Create(ctx, "u"+hex.EncodeToString(h[:])[:32], "", &schema.Audit{
			ActorID: actor, Action: "route.qualify", Target: target, FromRevision: schema.Ptr(cur.Revision), ToRevision: schema.Ptr(next.Revision),
			Detail: schema.Ptr(truncateRunes(verdict, schema.SizeJSONSmall)), At: time.Now().UTC().Format(time.RFC3339Nano)})
		if aerr != nil && !errors.Is(aerr, schema.ErrConflict) {
			return got, fmt.Errorf("qualification recorded on revision %d, audit entry not written: %w", next.Revision, aerr)
		}
		return got, nil
	}
}

func truncateRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	r := []rune(s[:n])
	return string(r[:len(r)-1])
}
