// Package immich pauses Immich's GPU work while a model holds a shared device: the ML
// queues (smartSearch, faceDetection, ocr by default) are paused with
// PUT /api/queues/{name} {"isPaused":true} (x-api-key; Immich v2.3+), falling back to the
// deprecated PUT /api/jobs/{name} {"command":"pause"} on older servers; pausing lets active
// jobs finish, so Pause waits until every paused queue reports no active job. What this
// agent paused is recorded in Redis before the first call, so a crash between pause and
// resume is repaired by Recover at the next start.
package immich

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"privateassistant/queue"

	"github.com/redis/go-redis/v9"
)

// DefaultQueues are the queues that call Immich's ML service.
var DefaultQueues = []string{"smartSearch", "faceDetection", "ocr"}

// ErrUnreachable: Immich did not answer (the shared device is then not taken, unless
// AllowUnreachable).
var ErrUnreachable = errors.New("immich: unreachable")

// Client pauses and resumes Immich's ML queues.
type Client struct {
	URL    string // http://immich:2283
	APIKey string // an admin key with queue.read + queue.update (or job.read + job.create)
	Queues []string
	RDB    redis.UniversalClient
	Agent  string // this agent's name: the Redis record is per agent
	// ActiveTimeout bounds the wait for active jobs to finish (default 10 min).
	ActiveTimeout time.Duration
	PollEvery     time.Duration // default 1 s
	// AllowUnreachable takes the device even when Immich cannot be reached.
	AllowUnreachable bool
	HTTP             *http.Client
	Log              *slog.Logger
}

func (c *Client) queues() []string {
	if len(c.Queues) == 0 {
		return DefaultQueues
	}
	return c.Queues
}

func (c *Client) recordKey() string { return queue.ImmichPausedKey(c.Agent) }

func (c *Client) log() *slog.Logger {
	if c.Log != nil {
		return c.Log
	}
	return slog.Default()
}

type apiError struct {
	status int
	body   string
}

func (e *apiError) Error() string { return fmt.Sprintf("immich answered %d: %s", e.status, e.body) }

func (c *Client) call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.URL, "/")+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("x-api-key", c.APIKey)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 15 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		// The URL holds no credential; the key travels in a header only.
		return fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode >= 300 {
		return &apiError{status: resp.StatusCode, body: strings.TrimSpace(string(b))}
	}
	if out != nil && len(b) > 0 {
		return json.Unmarshal(b, out)
	}
	return nil
}

// legacy reports whether err means the queues API is missing (pre-2.3 server).
func legacy(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && (ae.status == 404 || ae.status == 405)
}

func (c *Client) setPaused(ctx context.Context, name string, paused bool) error {
	err := c.call(ctx, "PUT", "/api/queues/"+url.PathEscape(name), map[string]any{"isPaused": paused}, nil)
	if legacy(err) {
		cmd := "resume"
		if paused {
			cmd = "pause"
		}
		err = c.call(ctx, "PUT", "/api/jobs/"+url.PathEscape(name), map[string]any{"command": cmd, "force": false}, nil)
	}
	return err
}

// active returns how many jobs of the queue still run.
func (c *Client) active(ctx context.Context, name string) (int, error) {
	var q struct {
		Statistics struct {
			Active int `json:"active"`
		} `json:"statistics"`
	}
	err := c.call(ctx, "GET", "/api/queues/"+url.PathEscape(name), nil, &q)
	if legacy(err) {
		var all map[string]struct {
			QueueStatus struct {
				IsActive bool `json:"isActive"`
			} `json:"queueStatus"`
			JobCounts struct {
				Active int `json:"active"`
			} `json:"jobCounts"`
		}
		if err := c.call(ctx, "GET", "/api/jobs", nil, &all); err != nil {
			return 0, err
		}
		s := all[name]
		if s.JobCounts.Active > 0 {
			return s.JobCounts.Active, nil
		}
		if s.QueueStatus.IsActive {
			return 1, nil
		}
		return 0, nil
	}
	return q.Statistics.Active, err
}

// Pause pauses the ML queues and waits until none has an active job. On failure what was
// paused is resumed again.
func (c *Client) Pause(ctx context.Context) error {
	if c.RDB != nil {
		if err := c.RDB.SAdd(ctx, c.recordKey(), toAny(c.queues())...).Err(); err != nil {
			return fmt.Errorf("immich: record the pause: %w", err)
		}
	}
	for _, q := range c.queues() {
		if err := c.setPaused(ctx, q, true); err != nil {
			if errors.Is(err, ErrUnreachable) && c.AllowUnreachable {
				c.log().Warn("Immich unreachable; taking the shared device anyway (configured)", "err", err)
				return nil
			}
			_ = c.Resume(context.WithoutCancel(ctx))
			return fmt.Errorf("immich: pause %s: %w", q, err)
		}
	}
	timeout := c.ActiveTimeout
	if timeout == 0 {
		timeout = 10 * time.Minute
	}
	every := c.PollEvery
	if every == 0 {
		every = time.Second
	}
	deadline := time.Now().Add(timeout)
	for {
		busy := ""
		for _, q := range c.queues() {
			n, err := c.active(ctx, q)
			if err != nil {
				_ = c.Resume(context.WithoutCancel(ctx))
				return fmt.Errorf("immich: read %s: %w", q, err)
			}
			if n > 0 {
				busy = fmt.Sprintf("%s has %d active job(s)", q, n)
				break
			}
		}
		if busy == "" {
			return nil
		}
		if time.Now().After(deadline) {
			_ = c.Resume(context.WithoutCancel(ctx))
			return fmt.Errorf("immich: still busy after %s: %s", timeout, busy)
		}
		select {
		case <-ctx.Done():
			_ = c.Resume(context.WithoutCancel(ctx))
			return ctx.Err()
		case <-time.After(every):
		}
	}
}

// Resume resumes what this agent paused and clears the record once all resumed.
func (c *Client) Resume(ctx context.Context) error {
	qs := c.queues()
	if c.RDB != nil {
		rec, err := c.RDB.SMembers(ctx, c.recordKey()).Result()
		if err == nil && len(rec) > 0 {
			qs = rec
		}
	}
	var errs []error
	for _, q := range qs {
		if err := c.setPaused(ctx, q, false); err != nil {
			errs = append(errs, fmt.Errorf("resume %s: %w", q, err))
			continue
		}
		if c.RDB != nil {
			_ = c.RDB.SRem(ctx, c.recordKey(), q).Err()
		}
	}
	return errors.Join(errs...)
}

// Recover resumes queues a previous run of this agent paused and never resumed (it
// crashed in between). It is a no-op when there is no record.
func (c *Client) Recover(ctx context.Context) (resumed []string, err error) {
	if c.RDB == nil {
		return nil, nil
	}
	rec, err := c.RDB.SMembers(ctx, c.recordKey()).Result()
	if err != nil || len(rec) == 0 {
		return nil, err
	}
	c.log().Info("resuming Immich queues paused before a restart", "queues", rec)
	return rec, c.Resume(ctx)
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
