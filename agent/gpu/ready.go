package gpu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Readiness probes (the agent's /readyz): they do their I/O on the caller's goroutine,
// never on the owner's, and change nothing.

// ErrNoModel: no model is loaded, so there is no model server to check (not a failure).
var ErrNoModel = errors.New("no model loaded")

// ErrNoTelemetry: the device has no telemetry source configured (not a failure).
var ErrNoTelemetry = errors.New("no telemetry configured")

var probeHTTP = &http.Client{Timeout: 5 * time.Second}

// ProbeModelServer checks the device's model server: a device whose state is unknown
// (its memory did not come back) or whose last load failed fails with the device's
// reason; with nothing loaded (idle, between a swap's steps, controlled by another agent,
// or after a crash: it reloads on next use) ErrNoModel, wrapped with the reason; else the
// backend says the loaded model's server runs and it answers GET …/models.
func (m *Manager) ProbeModelServer(ctx context.Context) error {
	st := m.Snapshot()
	switch {
	case st.Phase == PhaseUnknown || st.Phase == PhaseFailed:
		return fmt.Errorf("the device is %s: %s", st.Phase, st.Reason)
	case st.Loaded == "" || st.Endpoint == "":
		if st.Reason != "" {
			return fmt.Errorf("%w (%s)", ErrNoModel, st.Reason)
		}
		return ErrNoModel
	}
	alive, err := m.dev.Backend.Alive(ctx, st.Loaded)
	if err == nil && !alive {
		return fmt.Errorf("the server of %s has exited", st.Loaded)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(st.Endpoint, "/")+"/models", nil)
	if err != nil {
		return err
	}
	if k := m.dev.Backend.Key(); k != "" {
		req.Header.Set("Authorization", "Bearer "+k)
	}
	resp, err := probeHTTP.Do(req)
	if err != nil {
		return fmt.Errorf("the server of %s does not answer: %w", st.Loaded, errors.Unwrap(err))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the server of %s answered GET /models with %d", st.Loaded, resp.StatusCode)
	}
	return nil
}

// ProbeTelemetry reads the device once. ErrNoTelemetry when it has no source.
func (m *Manager) ProbeTelemetry(ctx context.Context) error {
	if m.dev.Telemetry == nil {
		return ErrNoTelemetry
	}
	_, err := m.dev.Telemetry.Read(ctx)
	return err
}
