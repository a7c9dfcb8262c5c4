package admit

import (
	"context"

	"privateassistant/schema"
)

// ReserveAlone runs a warm admission's reservation and nothing else (the plan as last
// seen, checked inside): BenchmarkWarmAdmission times it apart, beside the floor's own
// Redis round trip.
func (a *Admitter) ReserveAlone(ctx context.Context, st *schema.Store, req Request) (int64, error) {
	runID, _ := IDs(req.Owner, req.RequestID)
	_, raw, err := a.plan(ctx, st, req.Environment, req.Role, false)
	if err != nil {
		return 0, err
	}
	seq, _, err := a.reserve(ctx, st, req, runID, raw)
	return seq, err
}
