package hermes

import (
	"context"
	"errors"
	"sort"
	"time"
)

// Toolset is one entry of GET /v1/toolsets (Hermes 0.22: the toolsets the API server's
// agent can expose, whether each is enabled for the api_server platform, and the concrete
// tools it expands to).
type Toolset struct {
	Name       string   `json:"name"`
	Enabled    bool     `json:"enabled"`
	Configured bool     `json:"configured"`
	Tools      []string `json:"tools"`
}

// Toolsets lists the server's toolsets. An older Hermes without the route answers 404
// (ErrNotFound): which tools it offers is then unknown. The read is retried on a 5xx:
// Hermes 0.22.2.post1 answers 500 "Failed to enumerate toolsets" now and then just after
// it started (seen in CI, never twice in a row).
func (c *Client) Toolsets(ctx context.Context) ([]Toolset, error) {
	var err error
	for attempt := 0; attempt < toolsetAttempts; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(toolsetRetryPause):
			}
		}
		var ts []Toolset
		ts, err = c.toolsets(ctx)
		var he *Error
		if err == nil || !errors.As(err, &he) || he.Status < 500 {
			return ts, err
		}
	}
	return nil, err
}

const toolsetAttempts = 3

var toolsetRetryPause = 250 * time.Millisecond

func (c *Client) toolsets(ctx context.Context) ([]Toolset, error) {
	req, err := c.newRequest(ctx, "GET", "/v1/toolsets", nil)
	if err != nil {
		return nil, err
	}
	var out struct {
		Data []Toolset `json:"data"`
	}
	if _, err := c.do(req, &out); err != nil {
		return nil, err
	}
	return out.Data, nil
}

// EnabledToolsets maps each enabled toolset to its tools (sorted): what the API server
// offers a run's model.
func EnabledToolsets(all []Toolset) map[string][]string {
	out := map[string][]string{}
	for _, t := range all {
		if t.Enabled {
			tools := append([]string{}, t.Tools...)
			sort.Strings(tools)
			out[t.Name] = tools
		}
	}
	return out
}
