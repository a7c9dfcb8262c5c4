package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/stretchr/testify/require"

	"privateassistant/modeltest"
	"privateassistant/queue"
)

// TestCtrlCDuringAJobThenMakeDevAgain (issue 14, item 8): a chat job is streaming when
// `make dev` is stopped (Close is what main does on Ctrl-C) and the job outlives the
// grace, so the agent aborts it and hands its task back to asynq while Redis still runs.
// `make dev` again on the same data directory and origin: the job resumes and completes
// (the direct harness runs the answer again after a message.reset, so the answer is the
// script's text exactly once), and the System panel (/api/system) shows no phantom
// running task: no device queue holds an active or pending task once it is done.
func TestCtrlCDuringAJobThenMakeDevAgain(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	cfg := Config{Root: root, DataDir: t.TempDir(), Addr: freeAddr(), Grace: 300 * time.Millisecond}
	answer := strings.Repeat(" tok", 120)
	script := modeltest.Script{Turns: []modeltest.Turn{{Tokens: tokens(answer), TokenDelay: 25 * time.Millisecond}}}

	s, err := Start(t.Context(), cfg)
	require.NoError(t, err)
	closed := false
	defer func() {
		if !closed {
			s.Close()
		}
	}()
	s.Model.SetScript("#steady", script)
	api := devAPI{t: t, url: s.URL}
	jwt := api.jwt(s.DemoEmail, s.DemoPass)
	code, conv := api.call("POST", "/api/conversations", jwt, map[string]any{"title": "resume"})
	require.Equal(t, 201, code, conv)
	code, adm := api.call("POST", "/api/conversations/"+conv["id"].(string)+"/messages", jwt,
		map[string]any{"requestId": "resume-1", "text": "go #steady"})
	require.Equal(t, 202, code, adm)
	runID := adm["runId"].(string)
	require.Eventually(t, func() bool {
		for _, ev := range api.events(jwt, runID) {
			if ev.Type == queue.EventMessageDelta {
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "the job streams")

	s.Close() // Ctrl-C: the agent first (intake, grace, abort), Redis last
	closed = true
	require.Equal(t, "agent", s.Stopped[0])

	s, err = Start(t.Context(), cfg) // make dev again
	require.NoError(t, err)
	defer s.Close()
	s.Model.SetScript("#steady", script)
	jwt = api.jwt(s.DemoEmail, s.DemoPass)
	var run map[string]any
	require.Eventually(t, func() bool {
		_, run = api.call("GET", "/api/runs/"+runID, jwt, nil)
		return run["terminal"] == true
	}, 60*time.Second, 100*time.Millisecond, "the job resumes and settles")
	require.Equal(t, "completed", run["status"], "%v", run)

	// The answer is the script's text once: the deltas after the last reset.
	var text strings.Builder
	for _, ev := range api.events(jwt, runID) {
		switch ev.Type {
		case queue.EventMessageReset:
			text.Reset()
		case queue.EventMessageDelta:
			var d queue.MessageDeltaData
			require.NoError(t, json.Unmarshal(ev.Data, &d))
			text.WriteString(d.Text)
		}
	}
	var seqs []string
	for _, ev := range api.events(jwt, runID) {
		if ev.Type != queue.EventMessageDelta {
			seqs = append(seqs, fmt.Sprintf("%d:%s", ev.Sequence, ev.Type))
		} else {
			seqs = append(seqs, fmt.Sprintf("%d:%d", ev.Sequence, strings.Count(string(ev.Data), "tok")))
		}
	}
	require.Equal(t, answer, text.String(), "%v", seqs)

	// No phantom: the System panel's queues hold nothing active or pending.
	require.Eventually(t, func() bool {
		code, sys := api.call("GET", "/api/system", jwt, nil)
		if code != 200 {
			return false
		}
		qs, _ := sys["queues"].([]any)
		for _, q := range qs {
			m := q.(map[string]any)
			if m["active"].(float64) != 0 || m["pending"].(float64) != 0 || m["retry"].(float64) != 0 {
				return false
			}
		}
		return len(qs) > 0
	}, 20*time.Second, 100*time.Millisecond, "a device queue still shows the job")
}

// devAPI calls the dev stack's origin as the web chat does.
type devAPI struct {
	t   *testing.T
	url string
}

func (a devAPI) jwt(email, pass string) string {
	acc := appwrite.NewAccount(appwrite.NewClient(appwrite.WithEndpoint(a.url+"/v1"), appwrite.WithProject("privateassistant")))
	_, err := acc.CreateEmailPasswordSession(email, pass)
	require.NoError(a.t, err, email)
	j, err := acc.CreateJWT()
	require.NoError(a.t, err)
	return j.Jwt
}

func (a devAPI) call(method, path, tok string, body any) (int, map[string]any) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, a.url+path, rd)
	require.NoError(a.t, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(a.t, err)
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// events reads a run's events so far (no waiting), batch after batch.
func (a devAPI) events(tok, runID string) []queue.Event {
	var all []queue.Event
	for {
		req, err := http.NewRequest("GET", fmt.Sprintf("%s/api/runs/%s/events?after=%d&wait=0", a.url, runID, int64(len(all))), nil)
		require.NoError(a.t, err)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(a.t, err)
		var b struct{ Events []queue.Event }
		err = json.NewDecoder(resp.Body).Decode(&b)
		resp.Body.Close()
		require.NoError(a.t, err)
		for _, ev := range b.Events {
			require.Equal(a.t, int64(len(all)+1), ev.Sequence, "events arrive contiguous")
			all = append(all, ev)
		}
		if len(b.Events) == 0 {
			return all
		}
	}
}
