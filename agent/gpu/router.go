package gpu

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"
)

// RouterBackend drives a llama-server in router mode (started without -m, with
// --models-dir or --models-preset, ideally --no-models-autoload so nothing loads behind
// the manager's back): POST /models/load and /models/unload are asynchronous, so both
// poll GET /models until the model's status.value settles.
type RouterBackend struct {
	URL         string // router base, e.g. http://127.0.0.1:8080
	APIKey      string
	Footprints  map[string]int64
	LoadTimeout time.Duration // default 120 s
	PollEvery   time.Duration // default 50 ms
}

var _ Backend = (*RouterBackend)(nil)

type routerModel struct {
	ID     string `json:"id"`
	Status struct {
		Value    string `json:"value"`
		Failed   bool   `json:"failed"`
		ExitCode int    `json:"exit_code"`
	} `json:"status"`
}

func (r *RouterBackend) do(ctx context.Context, method, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(r.URL, "/")+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if r.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+r.APIKey)
	}
	resp, err := httpc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode >= 300 {
		return fmt.Errorf("router %s %s: %d %s", method, path, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// Models returns every model the router knows with its status.
func (r *RouterBackend) Models(ctx context.Context) (map[string]string, error) {
	var ms struct {
		Data []routerModel `json:"data"`
	}
	if err := r.do(ctx, "GET", "/models", nil, &ms); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, m := range ms.Data {
		v := m.Status.Value
		if m.Status.Failed {
			v = fmt.Sprintf("failed (exit %d)", m.Status.ExitCode)
		}
		out[m.ID] = v
	}
	return out, nil
}

func (r *RouterBackend) waitFor(ctx context.Context, model string, want ...string) error {
	timeout := r.LoadTimeout
	if timeout == 0 {
		timeout = 120 * time.Second
	}
	every := r.PollEvery
	if every == 0 {
		every = 50 * time.Millisecond
	}
	deadline := time.Now().Add(timeout)
	for {
		ms, err := r.Models(ctx)
		if err != nil {
			return err
		}
		st, ok := ms[model]
		if !ok {
			return fmt.Errorf("the router does not know model %q", model)
		}
		for _, w := range want {
			if st == w {
				return nil
			}
		}
		if strings.HasPrefix(st, "failed") {
			return fmt.Errorf("%s: %s", model, st)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: still %s after %s", model, st, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}

// Load asks the router to load model and waits until it is loaded.
func (r *RouterBackend) Load(ctx context.Context, model string) (string, error) {
	if err := r.do(ctx, "POST", "/models/load", map[string]any{"model": model}, nil); err != nil {
		// Loading an already loaded model is refused by some versions; the status decides.
		if ms, e := r.Models(ctx); e != nil || ms[model] != "loaded" {
			return "", err
		}
	}
	if err := r.waitFor(ctx, model, "loaded", "sleeping"); err != nil {
		return "", err
	}
	return strings.TrimRight(r.URL, "/") + "/v1", nil
}

// Unload asks the router to unload model and waits until it is.
func (r *RouterBackend) Unload(ctx context.Context, model string) error {
	if err := r.do(ctx, "POST", "/models/unload", map[string]any{"model": model}, nil); err != nil {
		if ms, e := r.Models(ctx); e == nil && ms[model] == "unloaded" {
			return nil
		}
		return err
	}
	return r.waitFor(ctx, model, "unloaded")
}

// Footprint implements Backend.
func (r *RouterBackend) Footprint(model string) int64 { return r.Footprints[model] }

// Alive reports whether the router still has model loaded (or asleep).
func (r *RouterBackend) Alive(ctx context.Context, model string) (bool, error) {
	ms, err := r.Models(ctx)
	if err != nil {
		return false, err
	}
	return ms[model] == "loaded" || ms[model] == "sleeping", nil
}

// Key implements Backend.
func (r *RouterBackend) Key() string { return r.APIKey }

// Resident implements Resident: the device's models the router holds now (loaded, asleep
// or still loading).
func (r *RouterBackend) Resident(ctx context.Context) ([]string, error) {
	ms, err := r.Models(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for id, st := range ms {
		if _, ours := r.Footprints[id]; ours && (st == "loaded" || st == "sleeping" || st == "loading") {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out, nil
}
