package apptools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"
)

// Callback is the body the agent POSTs to a tool's callback URL.
type Callback struct {
	Delivery  string          `json:"delivery"` // = the X-PA-Delivery header
	App       string          `json:"app"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	// Response is the runtime API's id of the response (run) whose model made the call:
	// the app started it for one of its users, so it knows whose lights to turn on.
	Response string `json:"response"`
}

// MaxResult bounds the callback's answer the model gets.
const MaxResult = 64 << 10

// ErrCallback: the host app answered the callback with an error (its text follows).
var ErrCallback = errors.New("apptools: the app's callback failed")

// Client signs and delivers callbacks.
type Client struct {
	HTTP  *http.Client // nil: a client with a 20 s timeout that follows no redirect
	Allow AllowList    // re-checked at call time (the list may have shrunk since the declaration)
	Now   func() time.Time
	// Issuer, when set, adds the callback's JWT (HeaderToken) beside the HMAC headers.
	Issuer *Issuer
}

func (c *Client) http() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return &http.Client{Timeout: 20 * time.Second,
		// A redirect would carry the signed call somewhere the allow-list did not name.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// Call delivers one call of t (arguments already checked against its schema) signed with
// secret, and returns the app's answer (JSON, or text wrapped as a JSON string). A non-2xx
// answer is ErrCallback with the app's text.
func (c *Client) Call(ctx context.Context, t Tool, secret []byte, delivery string, args json.RawMessage, response string) (json.RawMessage, error) {
	if !c.Allow.Allows(t.CallbackURL) {
		return nil, fmt.Errorf("%w: %s's callback URL is no longer on the allow-list", ErrNotAllowed, t.Name)
	}
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	body, err := json.Marshal(Callback{Delivery: delivery, App: t.App, Tool: t.Name, Arguments: args, Response: response})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.CallbackURL, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "private-assistant-apptools/1")
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	at := now()
	Sign(req.Header, secret, at, delivery, body)
	if c.Issuer != nil {
		tok, err := c.Issuer.CallbackToken(ctx, t.App, delivery, t.CallbackURL, body, at)
		if err != nil {
			return nil, fmt.Errorf("%w: the callback token cannot be signed: %v", ErrCallback, err)
		}
		req.Header.Set(HeaderToken, tok)
	}
	resp, err := c.http().Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCallback, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, MaxResult+1))
	if err != nil {
		return nil, fmt.Errorf("%w: read the answer: %v", ErrCallback, err)
	}
	if len(out) > MaxResult {
		return nil, fmt.Errorf("%w: the answer is over %d bytes", ErrCallback, MaxResult)
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("%w: %s answered %d: %s", ErrCallback, t.Name, resp.StatusCode, strings.TrimSpace(string(out)))
	}
	if len(bytes.TrimSpace(out)) == 0 {
		return json.RawMessage(`{"ok":true}`), nil
	}
	if !json.Valid(out) {
		b, _ := json.Marshal(string(out))
		return b, nil
	}
	return out, nil
}

func sortTools(ts []Tool) { sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name }) }

// Instructions is what a run started by the app is told about its tools: Hermes lists one
// MCP tool list per profile for every run, so the app's tools cannot be MCP tools of their
// own; the model calls them through mcp__pa__app_tool(name, arguments).
func Instructions(ts []Tool) string {
	if len(ts) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("The application you are serving offers these tools. Call one with the tool mcp__pa__app_tool, " +
		"giving its name and its arguments as an object that matches its schema:\n")
	for _, t := range ts {
		fmt.Fprintf(&b, "- %s: %s Arguments schema: %s\n", t.Name, strings.TrimSpace(t.Description), compact(t.Schema))
	}
	return b.String()
}

func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// ResponseID is the runtime API's id of a run's response (functions/service answers
// "resp_" and the run id).
func ResponseID(run string) string { return "resp_" + run }

// AppOfRequestID names the app whose runtime API admitted a run, from the run's request
// id ("rt:<app>:…", runtimeapi.RequestIDPrefix), or "".
func AppOfRequestID(requestID string) string {
	rest, ok := strings.CutPrefix(requestID, "rt:")
	if !ok {
		return ""
	}
	app, _, ok := strings.Cut(rest, ":")
	if !ok {
		return ""
	}
	return app
}
