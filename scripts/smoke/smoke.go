package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
)

// Config names the deployment to check (SMOKE_* and the usual .env names).
type Config struct {
	WebURL   string // the web chat's origin (/ and /api/*); PA_URL
	Endpoint string // Appwrite's API, with /v1; APPWRITE_ENDPOINT (default: WebURL + /v1, as make dev)
	Project  string // APPWRITE_PROJECT_ID (default privateassistant, as make dev)
	Email    string // a member's login for the signed-in checks (PA_SMOKE_EMAIL); empty: skipped
	Password string // PA_SMOKE_PASSWORD
	OpsURL   string // the agent's ops listener, e.g. http://10.0.0.12:9464 (PA_SMOKE_OPS_URL); empty: skipped
	Prompt   bool   // send one prompt and follow it to its answer (PA_SMOKE_PROMPT=1); reads only otherwise
	// WantWeb: the web chat is served at WebURL/ (a function host alone serves only /api).
	WantWeb bool
	Timeout time.Duration // per request (default 15 s); a prompt gets 2 minutes
}

// Result is one check's outcome.
type Result struct {
	Name   string
	Status string // PASS, FAIL, SKIP
	Detail string
}

type checker struct {
	cfg  Config
	http *http.Client
	jwt  string
	out  []Result
}

func (c *checker) add(name string, err error, detail string) {
	switch {
	case errors.Is(err, errSkip):
		c.out = append(c.out, Result{name, "SKIP", detail})
	case err != nil:
		c.out = append(c.out, Result{name, "FAIL", err.Error()})
	default:
		c.out = append(c.out, Result{name, "PASS", detail})
	}
}

var errSkip = errors.New("skipped")

// get fetches url (with the JWT when signed in) and returns status and body.
func (c *checker) do(ctx context.Context, method, url string, body any, hdr ...string) (int, http.Header, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.jwt != "" && strings.HasPrefix(url, c.cfg.WebURL+"/api/") {
		req.Header.Set("Authorization", "Bearer "+c.jwt)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, resp.Header, b, err
}

func expect(code, want int, body []byte) error {
	if code != want {
		return fmt.Errorf("HTTP %d (want %d): %.200s", code, want, body)
	}
	return nil
}

// Run checks the deployment and returns every result (it stops early only where a later
// check cannot run without an earlier one).
func Run(ctx context.Context, cfg Config) []Result {
	if cfg.Timeout == 0 {
		cfg.Timeout = 15 * time.Second
	}
	cfg.WebURL = strings.TrimRight(cfg.WebURL, "/")
	if cfg.Endpoint == "" {
		cfg.Endpoint = cfg.WebURL + "/v1"
	}
	if cfg.Project == "" {
		cfg.Project = "privateassistant"
	}
	c := &checker{cfg: cfg, http: &http.Client{Timeout: cfg.Timeout}}

	if cfg.WantWeb {
		code, h, b, err := c.do(ctx, "GET", cfg.WebURL+"/", nil)
		if err == nil {
			err = expect(code, 200, b)
		}
		if err == nil && !bytes.Contains(bytes.ToLower(b), []byte("<html")) {
			err = errors.New("/ is not the web chat's HTML")
		}
		c.add("web chat served", err, h.Get("Content-Type"))
	}
	code, _, b, err := c.do(ctx, "GET", cfg.WebURL+"/api/health", nil)
	if err == nil {
		err = expect(code, 200, b)
	}
	c.add("functions answer /api/health", err, "")
	code, _, b, err = c.do(ctx, "GET", cfg.WebURL+"/api/no-such-endpoint", nil)
	if err == nil && code != 404 {
		err = fmt.Errorf("an unknown /api path answered %d, not 404: %.100s", code, b)
	}
	c.add("unknown /api paths are refused", err, "")

	code, _, b, err = c.do(ctx, "GET", cfg.Endpoint+"/health/version", nil, "X-Appwrite-Project", cfg.Project)
	var ver struct{ Version string }
	if err == nil {
		err = expect(code, 200, b)
	}
	if err == nil {
		_ = json.Unmarshal(b, &ver)
		if ver.Version != "1.9.6" {
			err = fmt.Errorf("Appwrite %q, not 1.9.6", ver.Version)
		}
	}
	c.add("Appwrite 1.9.6", err, ver.Version)

	if cfg.Email == "" {
		c.add("signed-in checks", errSkip, "set PA_SMOKE_EMAIL and PA_SMOKE_PASSWORD (a member)")
	} else if err := c.signIn(); err != nil {
		c.add("sign in", err, "")
	} else {
		c.add("sign in", nil, cfg.Email)
		c.signedIn(ctx)
	}
	c.ops(ctx)
	return c.out
}

func (c *checker) signIn() error {
	cl := appwrite.NewClient(appwrite.WithEndpoint(c.cfg.Endpoint), appwrite.WithProject(c.cfg.Project))
	acc := appwrite.NewAccount(cl)
	if _, err := acc.CreateEmailPasswordSession(c.cfg.Email, c.cfg.Password); err != nil {
		return fmt.Errorf("session: %w", err)
	}
	j, err := acc.CreateJWT()
	if err != nil {
		return fmt.Errorf("jwt: %w", err)
	}
	c.jwt = j.Jwt
	return nil
}

func (c *checker) signedIn(ctx context.Context) {
	api := c.cfg.WebURL + "/api"
	code, _, b, err := c.do(ctx, "GET", api+"/me", nil)
	var me struct {
		Member bool     `json:"member"`
		Roles  []string `json:"roles"`
	}
	if err == nil {
		err = expect(code, 200, b)
	}
	if err == nil {
		_ = json.Unmarshal(b, &me)
		if !me.Member {
			err = errors.New("the smoke account is not a member (pa admin admit USER -yes)")
		}
	}
	c.add("GET /api/me: a member", err, "")

	code, _, b, err = c.do(ctx, "GET", api+"/roles", nil)
	if err == nil {
		err = expect(code, 200, b)
	}
	c.add("GET /api/roles", err, strings.TrimSpace(string(b)))

	code, _, b, err = c.do(ctx, "GET", api+"/system", nil)
	detail := ""
	if err == nil {
		err = expect(code, 200, b)
	}
	if err == nil {
		var sys struct {
			Devices []struct {
				Device string `json:"device"`
				State  string `json:"state"`
				Reason string `json:"reason"`
			} `json:"devices"`
		}
		_ = json.Unmarshal(b, &sys)
		var parts, unknown []string
		for _, d := range sys.Devices {
			parts = append(parts, d.Device+"="+d.State)
			if d.State == "unknown" {
				unknown = append(unknown, d.Device+": "+d.Reason)
			}
		}
		detail = strings.Join(parts, " ")
		if len(unknown) > 0 {
			err = fmt.Errorf("devices unknown: %s", strings.Join(unknown, "; "))
		}
	}
	c.add("GET /api/system: no device unknown", err, detail)

	code, _, b, err = c.do(ctx, "GET", api+"/conversations", nil)
	if err == nil {
		err = expect(code, 200, b)
	}
	c.add("GET /api/conversations", err, "")

	if !c.cfg.Prompt {
		c.add("one prompt", errSkip, "PA_SMOKE_PROMPT=1 sends one")
		return
	}
	start := time.Now()
	answer, err := c.prompt(ctx)
	c.add("one prompt answered", err, fmt.Sprintf("%.60q in %s", answer, time.Since(start).Round(time.Millisecond)))
}

// prompt creates a conversation, sends one message and follows its run to the end.
func (c *checker) prompt(ctx context.Context) (string, error) {
	api := c.cfg.WebURL + "/api"
	code, _, b, err := c.do(ctx, "POST", api+"/conversations", map[string]any{"title": "smoke test"})
	if err != nil {
		return "", err
	}
	if code != 200 && code != 201 {
		return "", expect(code, 201, b)
	}
	var conv struct{ ID string }
	_ = json.Unmarshal(b, &conv)
	rid := "smoke-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	code, _, b, err = c.do(ctx, "POST", api+"/conversations/"+conv.ID+"/messages", map[string]any{"requestId": rid, "text": "Say hello in five words."})
	if err != nil {
		return "", err
	}
	if err := expect(code, 202, b); err != nil {
		return "", err
	}
	var adm struct{ RunID string }
	_ = json.Unmarshal(b, &adm)
	var text strings.Builder
	after := int64(0)
	deadline := time.Now().Add(2 * time.Minute)
	long := &http.Client{Timeout: 40 * time.Second}
	for time.Now().Before(deadline) {
		saved := c.http
		c.http = long
		code, _, b, err = c.do(ctx, "GET", fmt.Sprintf("%s/runs/%s/events?after=%d&wait=20", api, adm.RunID, after), nil)
		c.http = saved
		if err != nil {
			return "", err
		}
		if err := expect(code, 200, b); err != nil {
			return "", err
		}
		var batch struct {
			Events []struct {
				Type string          `json:"type"`
				Data json.RawMessage `json:"data"`
			} `json:"events"`
			Next     int64  `json:"next"`
			Status   string `json:"status"`
			Terminal bool   `json:"terminal"`
		}
		if err := json.Unmarshal(b, &batch); err != nil {
			return "", err
		}
		for _, e := range batch.Events {
			if e.Type == "message.delta" {
				var d struct{ Text string }
				_ = json.Unmarshal(e.Data, &d)
				text.WriteString(d.Text)
			}
		}
		after = batch.Next
		if batch.Terminal {
			if batch.Status != "completed" {
				return text.String(), fmt.Errorf("the run ended %s", batch.Status)
			}
			return text.String(), nil
		}
	}
	return text.String(), errors.New("no answer within 2 minutes")
}

// ops checks the agent's ops listener: alive, ready (each dependency), metrics.
func (c *checker) ops(ctx context.Context) {
	if c.cfg.OpsURL == "" {
		c.add("agent ops listener", errSkip, "set PA_SMOKE_OPS_URL (the agent's PA_AGENT_OPS_ADDR)")
		return
	}
	ops := strings.TrimRight(c.cfg.OpsURL, "/")
	code, _, b, err := c.do(ctx, "GET", ops+"/healthz", nil)
	if err == nil {
		err = expect(code, 200, b)
	}
	c.add("agent /healthz", err, "")
	code, _, b, err = c.do(ctx, "GET", ops+"/readyz", nil)
	var ready struct {
		Ready  bool              `json:"ready"`
		Checks map[string]string `json:"checks"`
	}
	_ = json.Unmarshal(b, &ready)
	if err == nil && (code != 200 || !ready.Ready) {
		var bad []string
		for k, v := range ready.Checks {
			if strings.HasPrefix(v, "error: ") { // idle and unknown are not failures
				bad = append(bad, k+": "+v)
			}
		}
		err = fmt.Errorf("not ready (HTTP %d): %s", code, strings.Join(bad, "; "))
	}
	c.add("agent /readyz (every component)", err, fmt.Sprint(len(ready.Checks), " checks"))
	code, _, b, err = c.do(ctx, "GET", ops+"/metrics", nil)
	if err == nil {
		err = expect(code, 200, b)
	}
	if err == nil && !bytes.Contains(b, []byte("pa_redis_used_memory_bytes")) {
		err = errors.New("/metrics has no pa_redis_used_memory_bytes (the agent cannot read Redis)")
	}
	c.add("agent /metrics", err, "")
}
