// Command pa is the Private Assistant CLI. It calls the same function endpoints as the web
// chat, as the signed-in user (an Appwrite session; each call carries a short-lived JWT).
//
//	pa login EMAIL                     (password from PA_PASSWORD or stdin)
//	pa logout
//	pa conversations | pa new TITLE
//	pa send CONVERSATION TEXT [--role research]
//	pa runs [--conversation ID]
//	pa tail RUN                        follow a run's events until it ends
//	pa cancel RUN
//	pa approve RUN REQUEST once|deny
//	pa admin harnesses | routes | audit | settings
//	pa admin harness PROFILE --kind hermes --url URL --key-ref env:NAME [--yes]
//	pa admin route ROUTE --alias A --device D --model M --context N [--max-output N] [--yes]
//	pa admin validate PROFILE REVISION
//	pa admin select ROLE=HARNESS@REV:ROUTE@REV[:tool,tool] ... [--yes]
//
// Mutations print their plan and commit only with --yes. --json prints raw JSON.
// Settings: PA_URL (the web origin), APPWRITE_ENDPOINT, APPWRITE_PROJECT_ID (environment,
// then .env). The session is kept in $PA_CONFIG_DIR (default ~/.config/privateassistant).
//
// Exit codes: 0 ok, 1 error, 2 usage, 3 not signed in, 4 not found, 5 conflict, 6 the run
// did not complete.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"

	"privateassistant/internal/dotenv"
)

type cli struct {
	out, errw io.Writer
	in        io.Reader
	json      bool
	yes       bool
	base      string
	endpoint  string
	project   string
	dir       string
	http      *http.Client
}

type exitErr struct {
	code int
	msg  string
}

func (e *exitErr) Error() string { return e.msg }

func fail(code int, format string, args ...any) error {
	return &exitErr{code, fmt.Sprintf(format, args...)}
}

func main() {
	_ = dotenv.Load(".env")
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, in io.Reader, out, errw io.Writer) int {
	c := &cli{out: out, errw: errw, in: in, base: strings.TrimRight(os.Getenv("PA_URL"), "/"),
		endpoint: os.Getenv("APPWRITE_ENDPOINT"), project: os.Getenv("APPWRITE_PROJECT_ID"), http: &http.Client{Timeout: 40 * time.Second}}
	if c.base == "" {
		c.base = "http://127.0.0.1:8080"
	}
	if c.endpoint == "" {
		c.endpoint = c.base + "/v1"
	}
	if c.project == "" {
		c.project = "privateassistant"
	}
	c.dir = os.Getenv("PA_CONFIG_DIR")
	if c.dir == "" {
		home, _ := os.UserHomeDir()
		c.dir = filepath.Join(home, ".config", "privateassistant")
	}
	var rest []string
	flags := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--json":
			c.json = true
		case a == "--yes":
			c.yes = true
		case strings.HasPrefix(a, "--"):
			if i+1 >= len(args) {
				fmt.Fprintln(errw, "pa: missing value for", a)
				return 2
			}
			flags[strings.TrimPrefix(a, "--")] = args[i+1]
			i++
		default:
			rest = append(rest, a)
		}
	}
	err := c.dispatch(rest, flags)
	if err == nil {
		return 0
	}
	var ee *exitErr
	if errors.As(err, &ee) {
		fmt.Fprintln(errw, "pa:", ee.msg)
		return ee.code
	}
	fmt.Fprintln(errw, "pa:", err)
	return 1
}

func usage() error { return fail(2, "usage: see `go doc ./scripts/pa`") }

func (c *cli) dispatch(a []string, f map[string]string) error {
	if len(a) == 0 {
		return usage()
	}
	switch a[0] {
	case "login":
		if len(a) != 2 {
			return usage()
		}
		return c.login(a[1])
	case "logout":
		return os.Remove(c.sessionFile())
	case "conversations":
		return c.print(c.call("GET", "/api/conversations?limit=100", nil))
	case "new":
		if len(a) != 2 {
			return usage()
		}
		return c.print(c.call("POST", "/api/conversations", map[string]any{"title": a[1], "requestId": reqID()}))
	case "send":
		if len(a) != 3 {
			return usage()
		}
		body := map[string]any{"requestId": reqID(), "text": a[2]}
		if r := f["role"]; r != "" {
			body["role"] = r
		}
		return c.print(c.call("POST", "/api/conversations/"+a[1]+"/messages", body))
	case "runs":
		q := "/api/runs?limit=100"
		if conv := f["conversation"]; conv != "" {
			q += "&conversationId=" + conv
		}
		return c.print(c.call("GET", q, nil))
	case "tail":
		if len(a) != 2 {
			return usage()
		}
		return c.tail(a[1])
	case "cancel":
		if len(a) != 2 {
			return usage()
		}
		return c.print(c.call("POST", "/api/runs/"+a[1]+"/cancel", map[string]any{}))
	case "approve":
		if len(a) != 4 {
			return usage()
		}
		return c.print(c.call("POST", "/api/runs/"+a[1]+"/approval", map[string]any{"requestId": a[2], "choice": a[3]}))
	case "admin":
		return c.admin(a[1:], f)
	}
	return usage()
}

func reqID() string { return fmt.Sprintf("cli-%d", time.Now().UnixNano()) }

func (c *cli) sessionFile() string { return filepath.Join(c.dir, "session") }

// login opens an Appwrite session and keeps its secret (mode 0600) for later calls.
func (c *cli) login(email string) error {
	pw := os.Getenv("PA_PASSWORD")
	if pw == "" {
		fmt.Fprint(c.errw, "password: ")
		line, _ := bufio.NewReader(c.in).ReadString('\n')
		pw = strings.TrimSpace(line)
	}
	req, _ := http.NewRequest("POST", c.endpoint+"/account/sessions/email", strings.NewReader(fmt.Sprintf(`{"email":%q,"password":%q}`, email, pw)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Appwrite-Project", c.project)
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 201 {
		b, _ := io.ReadAll(resp.Body)
		return fail(3, "sign-in failed (%d): %s", resp.StatusCode, b)
	}
	secret := ""
	for _, ck := range resp.Cookies() {
		if ck.Name == "a_session_"+c.project {
			secret = ck.Value
		}
	}
	if secret == "" {
		return fail(1, "Appwrite did not return a session cookie")
	}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(c.sessionFile(), []byte(secret), 0o600); err != nil {
		return err
	}
	fmt.Fprintln(c.out, "signed in as", email)
	return nil
}

func (c *cli) jwt() (string, error) {
	b, err := os.ReadFile(c.sessionFile())
	if err != nil {
		return "", fail(3, "not signed in: run `pa login EMAIL`")
	}
	acc := appwrite.NewAccount(appwrite.NewClient(appwrite.WithEndpoint(c.endpoint), appwrite.WithProject(c.project), appwrite.WithSession(strings.TrimSpace(string(b)))))
	j, err := acc.CreateJWT()
	if err != nil {
		return "", fail(3, "the session has ended: run `pa login EMAIL` (%v)", err)
	}
	return j.Jwt, nil
}

// call sends one API request and returns the raw JSON answer.
func (c *cli) call(method, path string, body any) (json.RawMessage, error) {
	tok, err := c.jwt()
	if err != nil {
		return nil, err
	}
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, c.base+path, rd)
	req.Header.Set("Authorization", "Bearer "+tok)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 400 {
		var env struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		_ = json.Unmarshal(b, &env)
		code := 1
		switch resp.StatusCode {
		case 401:
			code = 3
		case 404:
			code = 4
		case 409:
			code = 5
		}
		if env.Error.Code == "" {
			return b, fail(code, "%s %s: HTTP %d", method, path, resp.StatusCode)
		}
		return b, fail(code, "%s: %s", env.Error.Code, env.Error.Message)
	}
	return b, nil
}

func (c *cli) print(b json.RawMessage, err error) error {
	if err != nil {
		if c.json && len(b) > 0 {
			fmt.Fprintln(c.out, string(b))
		}
		return err
	}
	if c.json {
		fmt.Fprintln(c.out, string(b))
		return nil
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, b, "", "  ") == nil {
		fmt.Fprintln(c.out, pretty.String())
	} else {
		fmt.Fprintln(c.out, string(b))
	}
	return nil
}

// tail follows a run until it is terminal, printing each event once.
func (c *cli) tail(run string) error {
	after := int64(0)
	deadline := time.Now().Add(2 * time.Hour)
	for time.Now().Before(deadline) {
		b, err := c.call("GET", fmt.Sprintf("/api/runs/%s/events?after=%d&wait=20", run, after), nil)
		var ee *exitErr
		if errors.As(err, &ee) && ee.code != 1 {
			return err
		}
		if err != nil {
			time.Sleep(time.Second)
			continue
		}
		var batch struct {
			Events []struct {
				Sequence int64           `json:"sequence"`
				Type     string          `json:"type"`
				Data     json.RawMessage `json:"data"`
			} `json:"events"`
			Next     int64  `json:"next"`
			Status   string `json:"status"`
			Terminal bool   `json:"terminal"`
		}
		if err := json.Unmarshal(b, &batch); err != nil {
			return err
		}
		for _, e := range batch.Events {
			if c.json {
				line, _ := json.Marshal(e)
				fmt.Fprintln(c.out, string(line))
			} else if e.Type == "message.delta" {
				var d struct{ Text string }
				_ = json.Unmarshal(e.Data, &d)
				fmt.Fprint(c.out, d.Text)
			} else {
				fmt.Fprintf(c.out, "\n[%d %s] %s\n", e.Sequence, e.Type, e.Data)
			}
			after = e.Sequence
		}
		if batch.Terminal {
			if !c.json {
				fmt.Fprintln(c.out, "\nrun", batch.Status)
			}
			if batch.Status != "completed" {
				return fail(6, "run %s", batch.Status)
			}
			return nil
		}
	}
	return fail(1, "gave up after 2 h")
}

func (c *cli) admin(a []string, f map[string]string) error {
	if len(a) == 0 {
		return usage()
	}
	commit := func(path, method string, body map[string]any) error {
		body["preview"] = true
		b, err := c.call(method, path, body)
		if err != nil {
			return c.print(b, err)
		}
		if !c.yes {
			fmt.Fprintln(c.errw, "plan (commit with --yes):")
			return c.print(b, nil)
		}
		var p struct {
			Plan struct {
				BasedOn int64 `json:"basedOnRevision"`
			} `json:"plan"`
		}
		_ = json.Unmarshal(b, &p)
		body["preview"] = false
		if _, ok := body["expectedRevision"]; !ok || method == "POST" {
			body["expectedRevision"] = p.Plan.BasedOn
		}
		return c.print(c.call(method, path, body))
	}
	switch a[0] {
	case "harnesses":
		return c.print(c.call("GET", "/api/harnesses", nil))
	case "routes":
		return c.print(c.call("GET", "/api/model-routes", nil))
	case "audit":
		return c.print(c.call("GET", "/api/audit", nil))
	case "settings":
		return c.print(c.call("GET", "/api/settings", nil))
	case "validate":
		if len(a) != 3 {
			return usage()
		}
		return c.print(c.call("POST", "/api/harnesses/"+a[1]+"/validate?revision="+a[2], nil))
	case "harness":
		if len(a) != 2 {
			return usage()
		}
		return commit("/api/harnesses", "POST", map[string]any{"input": map[string]any{"profileId": a[1], "kind": f["kind"],
			"baseUrl": f["url"], "profileName": f["name"], "keyRef": f["key-ref"]}})
	case "route":
		if len(a) != 2 {
			return usage()
		}
		n, _ := strconv.ParseInt(f["context"], 10, 64)
		mo, _ := strconv.ParseInt(f["max-output"], 10, 64)
		return commit("/api/model-routes", "POST", map[string]any{"input": map[string]any{"routeId": a[1], "alias": f["alias"],
			"device": f["device"], "backendModel": f["model"], "contextBudget": n, "maxOutput": mo}})
	case "select":
		roles := map[string]any{}
		for _, spec := range a[1:] {
			role, rb, err := parseRole(spec)
			if err != nil {
				return err
			}
			roles[role] = rb
		}
		cur, err := c.call("GET", "/api/settings", nil)
		if err != nil {
			return err
		}
		var s struct {
			Revision int64 `json:"revision"`
		}
		_ = json.Unmarshal(cur, &s)
		return commit("/api/harness-selection", "PUT", map[string]any{"expectedRevision": s.Revision, "roles": roles})
	}
	return usage()
}

// parseRole reads ROLE=HARNESS@REV:ROUTE@REV[:tool,tool].
func parseRole(spec string) (string, map[string]any, error) {
	role, rest, ok := strings.Cut(spec, "=")
	parts := strings.Split(rest, ":")
	if !ok || len(parts) < 2 {
		return "", nil, fail(2, "bad role %q: use ROLE=HARNESS@REV:ROUTE@REV[:tool,tool]", spec)
	}
	h, hr, ok1 := strings.Cut(parts[0], "@")
	r, rr, ok2 := strings.Cut(parts[1], "@")
	hrev, e1 := strconv.ParseInt(hr, 10, 64)
	rrev, e2 := strconv.ParseInt(rr, 10, 64)
	if !ok1 || !ok2 || e1 != nil || e2 != nil {
		return "", nil, fail(2, "bad role %q: use ROLE=HARNESS@REV:ROUTE@REV[:tool,tool]", spec)
	}
	b := map[string]any{"harness": h, "harnessRevision": hrev, "route": r, "routeRevision": rrev}
	if len(parts) > 2 {
		tools := []string{}
		for _, t := range strings.Split(parts[2], ",") {
			if t != "" {
				tools = append(tools, t)
			}
		}
		b["tools"] = tools
	}
	return role, b, nil
}
