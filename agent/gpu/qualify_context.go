package gpu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// ContextReport is what a backend says about the context it serves a model with.
type ContextReport struct {
	// Served is the context one request (one slot) can use: llama-server's per-slot n_ctx,
	// Ollama's num_ctx as loaded (/api/ps), capped by Trained when both are known. 0: the
	// backend reported nothing.
	Served int64 `json:"served"`
	// Trained is the model's training context when reported (n_ctx_train, Ollama's
	// <arch>.context_length from /api/show); 0 when unknown.
	Trained int64 `json:"trained,omitempty"`
	// Slots is how many requests the server runs at once when it says (llama-server's
	// total_slots); 0 when unknown.
	Slots int `json:"slots,omitempty"`
	// Source names where Served came from (for the recorded qualification).
	Source string `json:"source"`
}

// ErrContextUnreported: the backend reports no context for the model, so a budget cannot
// be verified (readiness never passes vacuously).
var ErrContextUnreported = errors.New("gpu: the backend reports no context length")

// Check verifies that the served context covers budget (budget <= 0: nothing to check).
func (r ContextReport) Check(budget int64) error {
	if budget <= 0 {
		return nil
	}
	if r.Served <= 0 {
		return fmt.Errorf("%w, so the route's budget of %d cannot be verified", ErrContextUnreported, budget)
	}
	if r.Served < budget {
		msg := fmt.Sprintf("the backend serves %d tokens of context per request", r.Served)
		if r.Trained > 0 && r.Trained == r.Served {
			msg += fmt.Sprintf(" (capped by the model's training context of %d)", r.Trained)
		} else if r.Trained > 0 {
			msg += fmt.Sprintf(" (the model was trained for %d)", r.Trained)
		}
		return fmt.Errorf("%s; the route's budget is %d", msg, budget)
	}
	return nil
}

// contextSource is a backend that reports the context it loaded a model with through its
// own API (Ollama); other backends are asked through the OpenAI-compatible endpoint.
type contextSource interface {
	ServedContext(ctx context.Context, model string) (ContextReport, error)
}

// ContextOf asks the backend what context it serves model with.
func ContextOf(ctx context.Context, b Backend, endpoint, model string) (ContextReport, error) {
	if cs, ok := b.(contextSource); ok {
		return cs.ServedContext(ctx, model)
	}
	return ServedContext(ctx, endpoint, model, b.Key())
}

// readyFor is the readiness check of a load: a one-token completion, then the served
// context (as the backend reports it) against the budget.
func readyFor(ctx context.Context, b Backend, endpoint, model string, budget int64) error {
	if err := Ready(ctx, endpoint, model, b.Key(), 0); err != nil {
		return err
	}
	if budget <= 0 {
		return nil
	}
	rep, err := ContextOf(ctx, b, endpoint, model)
	if err != nil {
		return fmt.Errorf("context check: %w", err)
	}
	return rep.Check(budget)
}

func getJSON(ctx context.Context, method, url, key string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := httpc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s answered %d %s", method, url, resp.StatusCode, strings.TrimSpace(string(msg)))
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(out)
}

// ServedContext reads an OpenAI-compatible server's model list (…/v1/models) for the
// context it serves model with: llama-server's meta.n_ctx (the per-slot context; the
// listed context_length is the trained one in router mode), else context_length, else
// what the model was trained for; always capped by n_ctx_train (llama-server warns and
// serves a context beyond it, which the model was never trained for). llama-server's
// /props, when it answers, gives the per-slot n_ctx and the slot count directly.
func ServedContext(ctx context.Context, endpoint, model, key string) (ContextReport, error) {
	var ms struct {
		Data []struct {
			ID            string `json:"id"`
			ContextLength int64  `json:"context_length"`
			Meta          struct {
				NCtx      int64 `json:"n_ctx"`
				NCtxTrain int64 `json:"n_ctx_train"`
			} `json:"meta"`
		} `json:"data"`
	}
	base := strings.TrimRight(endpoint, "/")
	if err := getJSON(ctx, "GET", base+"/models", key, nil, &ms); err != nil {
		return ContextReport{}, err
	}
	// Only the entry for this model counts when the server lists several (a router).
	entries := ms.Data[:0:0]
	for _, m := range ms.Data {
		if m.ID == model {
			entries = append(entries, m)
		}
	}
	if len(entries) == 0 && len(ms.Data) == 1 {
		entries = ms.Data // a single-model server may list its file name, not the alias
	}
	var rep ContextReport
	for _, m := range entries {
		r := ContextReport{Trained: m.Meta.NCtxTrain}
		switch {
		case m.Meta.NCtx > 0:
			r.Served, r.Source = m.Meta.NCtx, "/v1/models meta.n_ctx"
		case m.ContextLength > 0:
			r.Served, r.Source = m.ContextLength, "/v1/models context_length"
		case m.Meta.NCtxTrain > 0:
			r.Served, r.Source = m.Meta.NCtxTrain, "/v1/models meta.n_ctx_train"
		}
		if r.Trained > 0 && r.Served > r.Trained {
			r.Served = r.Trained
		}
		// Several entries for one id: the smallest is what is guaranteed.
		if rep.Source == "" || (r.Served > 0 && r.Served < rep.Served) {
			rep = r
		}
	}
	// llama-server (not in router mode) answers /props at its root: the per-slot context
	// and the slot count. A server without it (or one that refuses) leaves the list's figure.
	var props struct {
		TotalSlots int `json:"total_slots"`
		Default    struct {
			NCtx int64 `json:"n_ctx"`
		} `json:"default_generation_settings"`
	}
	if err := getJSON(ctx, "GET", strings.TrimSuffix(base, "/v1")+"/props", key, nil, &props); err == nil {
		rep.Slots = props.TotalSlots
		if n := props.Default.NCtx; n > 0 && (rep.Served == 0 || n < rep.Served) {
			rep.Served, rep.Source = n, "/props default_generation_settings.n_ctx"
			if rep.Trained > 0 && rep.Served > rep.Trained {
				rep.Served = rep.Trained
			}
		}
	} else if ctx.Err() != nil {
		return ContextReport{}, ctx.Err()
	}
	return rep, nil
}

// ServedContext asks Ollama for the context model is loaded with (/api/ps
// context_length, the num_ctx it was loaded with) and what it was trained for (/api/show
// model_info "<arch>.context_length"). Ollama's /v1/models says nothing about context.
func (o *OllamaBackend) ServedContext(ctx context.Context, model string) (ContextReport, error) {
	base := strings.TrimRight(o.URL, "/")
	var ps struct {
		Models []struct {
			Name          string `json:"name"`
			Model         string `json:"model"`
			ContextLength int64  `json:"context_length"`
		} `json:"models"`
	}
	if err := getJSON(ctx, "GET", base+"/api/ps", "", nil, &ps); err != nil {
		return ContextReport{}, fmt.Errorf("ollama /api/ps: %w", err)
	}
	var rep ContextReport
	found := false
	for _, m := range ps.Models {
		if m.Name == model || m.Model == model {
			found = true
			rep.Served, rep.Source = m.ContextLength, "ollama /api/ps context_length"
		}
	}
	if !found {
		return ContextReport{}, fmt.Errorf("ollama does not list %s as loaded (/api/ps)", model)
	}
	var show struct {
		ModelInfo map[string]any `json:"model_info"`
	}
	if err := getJSON(ctx, "POST", base+"/api/show", "", map[string]any{"model": model}, &show); err == nil {
		for k, v := range show.ModelInfo {
			if f, ok := v.(float64); ok && strings.HasSuffix(k, ".context_length") {
				rep.Trained = int64(f)
			}
		}
	} else if ctx.Err() != nil {
		return ContextReport{}, ctx.Err()
	}
	if rep.Trained > 0 && rep.Served > rep.Trained {
		rep.Served = rep.Trained
	}
	return rep, nil
}
