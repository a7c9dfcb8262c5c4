package validator_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/validator"
	"privateassistant/hermes/hermestest"
	"privateassistant/schema"
	"privateassistant/schema/schematest"
	"privateassistant/settings"
)

const hermesKey = "validator-test-hermes-key-0123456789"

// startDouble serves the Hermes double with hermesKey; durable gives it a data folder
// (durable runs idempotency).
func startDouble(t *testing.T, durable bool) string {
	t.Helper()
	opts := hermestest.Options{APIKey: hermesKey, ModelURL: "http://127.0.0.1:1/v1", Version: "0.22.2-test"}
	if durable {
		opts.DataDir = t.TempDir()
	}
	d, err := hermestest.New(opts)
	require.NoError(t, err)
	// The double has no GET /v1/toolsets; serve Hermes 0.22's shape beside it (same key).
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/toolsets" {
			d.ServeHTTP(w, r)
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+hermesKey {
			http.Error(w, `{"error":{"code":"invalid_api_key"}}`, 401)
			return
		}
		_, _ = w.Write([]byte(`{"data":[{"name":"file","enabled":true,"configured":true,"tools":["write_file","read_file"]},{"name":"web","enabled":false,"tools":["web_search"]}]}`))
	}))
	t.Cleanup(func() { s.Close(); d.Close() })
	return s.URL
}

// keyFile writes key to a file the way an operator keeps a Hermes key on the agent's
// host, and returns its file: reference.
func keyFile(t *testing.T, key string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "hermes.key")
	require.NoError(t, os.WriteFile(p, []byte(key+"\n"), 0o600))
	return "file:" + p
}

func register(t *testing.T, adm *settings.Admin, id, url, ref string) {
	t.Helper()
	_, _, err := adm.CommitHarness(context.Background(), "admin", settings.HarnessInput{ProfileID: id, Kind: "hermes", BaseURL: url, KeyRef: ref}, 0)
	require.NoError(t, err)
}

func revision(t *testing.T, st *schema.Store, id string) *schema.HarnessProfile {
	t.Helper()
	ps, err := schema.For[schema.HarnessProfile](st, schema.CollHarnessProfiles).All(context.Background(), schema.ListQuery{})
	require.NoError(t, err)
	for i := range ps {
		if ps[i].ProfileID == id && ps[i].Revision == 1 {
			return &ps[i]
		}
	}
	t.Fatalf("no revision 1 of %s", id)
	return nil
}

func TestValidatesWhereTheKeyIs(t *testing.T) {
	ctx := context.Background()
	env := schematest.New(t)
	adm := &settings.Admin{Store: env.Store}
	good := startDouble(t, true)
	register(t, adm, "filekey", good, keyFile(t, hermesKey))
	register(t, adm, "missingfile", good, "file:"+filepath.Join(t.TempDir(), "absent.key"))
	register(t, adm, "wrongkey", good, keyFile(t, "not-the-hermes-key-0123456789"))
	register(t, adm, "volatile", startDouble(t, false), keyFile(t, hermesKey))

	// The admin's request is recorded, nothing is probed yet.
	for _, id := range []string{"filekey", "missingfile", "wrongkey", "volatile"} {
		rec, pr, err := adm.Validate(ctx, "admin", id, 1)
		require.NoError(t, err)
		require.True(t, pr.Pending, id)
		require.False(t, rec.Verified, id)
		require.NotNil(t, rec.ValidationRequestedAt, id)
		require.Nil(t, rec.VerifiedAt, id)
	}

	v := &validator.Validator{Store: env.Store, Every: 20 * time.Millisecond, AgentID: "test-agent"}
	require.NoError(t, v.Start(ctx))
	defer v.Stop()
	require.Eventually(t, func() bool {
		pending, err := settings.PendingValidations(ctx, env.Store)
		return err == nil && len(pending) == 0
	}, 10*time.Second, 20*time.Millisecond, "the agent completes every request")
	v.Stop()

	ok := revision(t, env.Store, "filekey")
	require.True(t, ok.Verified, "the agent read the file: key and Hermes accepted it")
	require.NotNil(t, ok.VerifiedAt)
	require.Nil(t, ok.ValidationRequestedAt)
	require.Equal(t, "0.22.2-test", *ok.HermesVersion)
	require.NotNil(t, ok.Capabilities)
	var caps struct {
		RunsIdempotency map[string]any      `json:"runs_idempotency"`
		Toolsets        map[string][]string `json:"toolsets"`
		RunEventsSSE    bool                `json:"run_events_sse"`
	}
	require.NoError(t, json.Unmarshal([]byte(*ok.Capabilities), &caps))
	require.Equal(t, true, caps.RunsIdempotency["durable"], *ok.Capabilities)
	require.True(t, caps.RunEventsSSE)
	require.Equal(t, map[string][]string{"file": {"read_file", "write_file"}}, caps.Toolsets, "the enabled toolsets are recorded")

	for id, why := range map[string]string{
		"missingfile": "the agent cannot read the key file:",
		"wrongkey":    "401",
		"volatile":    "durable",
	} {
		r := revision(t, env.Store, id)
		require.False(t, r.Verified, id)
		require.NotNil(t, r.VerifiedAt, "%s: a result is recorded", id)
		require.Nil(t, r.ValidationRequestedAt, id)
		require.Contains(t, auditDetail(t, env.Store, id), why, id)
	}
	require.NotContains(t, auditDetail(t, env.Store, "wrongkey"), "not-the-hermes-key", "the key never reaches the record")
}

// auditDetail is the detail of the latest harness.validate entry of id (the reason).
func auditDetail(t *testing.T, st *schema.Store, id string) string {
	t.Helper()
	all, err := schema.For[schema.Audit](st, schema.CollAudit).All(context.Background(), schema.ListQuery{})
	require.NoError(t, err)
	out := ""
	for _, a := range all {
		if a.Action == "harness.validate" && a.Target != "" && len(a.Target) > len("harness/"+id+"/") && a.Target[:len("harness/"+id+"/")] == "harness/"+id+"/" {
			require.Equal(t, "agent:test-agent", a.ActorID)
			out = *a.Detail
		}
	}
	require.NotEmpty(t, out, "an audit entry for %s", id)
	return out
}

// A request made while the agent probes stays pending: the result of the older request
// does not clear it.
func TestANewerRequestStaysPending(t *testing.T) {
	ctx := context.Background()
	env := schematest.New(t)
	adm := &settings.Admin{Store: env.Store}
	register(t, adm, "h", startDouble(t, true), keyFile(t, hermesKey))
	_, _, err := adm.Validate(ctx, "admin", "h", 1)
	require.NoError(t, err)
	read := revision(t, env.Store, "h") // what the agent read before probing
	// Appwrite keeps datetimes to the millisecond: the next request gets a later one.
	time.Sleep(2 * time.Millisecond)
	_, _, err = adm.Validate(ctx, "admin", "h", 1)
	require.NoError(t, err) // a second request in between (a later timestamp)
	got, pr, err := adm.CompleteValidation(ctx, "agent:x", read, settings.Probe{Verified: true, Version: "v"})
	require.NoError(t, err)
	require.True(t, pr.Verified)
	require.True(t, got.Verified)
	require.NotNil(t, got.ValidationRequestedAt, "the newer request is still pending")
	pending, err := settings.PendingValidations(ctx, env.Store)
	require.NoError(t, err)
	require.Len(t, pending, 1)
}
