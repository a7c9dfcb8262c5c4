package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"privateassistant/stacktest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// TestSmokeAgainstARunningStack: against the functions, the emulator and a running agent,
// every check passes, the prompt is answered; with the agent's ops listener gone and a
// non-member's login, those checks fail and the exit code says so.
func TestSmokeAgainstARunningStack(t *testing.T) {
	t.Parallel()
	env := stacktest.New(t)
	a := env.StartAgent(t)
	env.SignUp(t, "smoke@example.com", "password-smoke")
	cfg := Config{WebURL: env.URL, Endpoint: env.TS.URL, Project: env.TS.Project, Email: "smoke@example.com",
		Password: "password-smoke", OpsURL: "http://" + a.Ops.Bound(), Prompt: true}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rs := Run(ctx, cfg)
	var out bytes.Buffer
	require.Equal(t, 0, report(&out, env.URL, rs), out.String())
	require.Contains(t, out.String(), "PASS one prompt answered")
	require.Contains(t, out.String(), "PASS agent /readyz")

	// Reads only without PA_SMOKE_PROMPT.
	cfg.Prompt = false
	out.Reset()
	require.Equal(t, 0, report(&out, env.URL, Run(ctx, cfg)), out.String())
	require.Contains(t, out.String(), "SKIP one prompt")

	// A stranger's login and no agent: failures, exit code 1.
	env.Stranger(t, "stranger@example.com", "password-stranger")
	cfg.Email, cfg.Password, cfg.OpsURL = "stranger@example.com", "password-stranger", "http://127.0.0.1:1"
	out.Reset()
	require.Equal(t, 1, report(&out, env.URL, Run(ctx, cfg)))
	require.Contains(t, out.String(), "FAIL GET /api/me: a member")
	require.Contains(t, out.String(), "FAIL agent /healthz")
	require.False(t, strings.Contains(out.String(), "password-stranger"), "no secret in the report")
}
