package mcpjobs

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"privateassistant/admit"
	"privateassistant/functions/functionstest"
	"privateassistant/queue"
	"privateassistant/runconfig"
	"privateassistant/schema"
	"privateassistant/schema/runstate"
)

// A label-restricted role through enqueue_job, on the real admission (admit on
// the agent's store, as the daemon wires it). The agent's key cannot read users; the
// labels are those the coordinating run's own web admission verified (from the JWT) and
// kept on its run record, which the server reads as the daemon does (Runs). So a user
// WITH the label may delegate to the restricted role, a user without it is refused (the
// model reads the refusal as a tool error; nothing is admitted), a run recorded before
// the field existed is refused as before, and an open role is admitted for everyone. The
// job does not keep the carried labels, so its own delegation to the role is refused.
func TestARestrictedRoleFollowsTheCoordinatorsLabels(t *testing.T) {
	boot := `{
  "harnesses": [{"profileId": "direct", "kind": "direct", "baseUrl": "http://127.0.0.1:1/v1", "profileName": "", "keyRef": "GATEWAY_API_KEY"}],
  "routes": [{"routeId": "work", "alias": "work", "device": "xtx", "backendModel": "demo-work", "contextBudget": 131072, "maxOutput": 4096}],
  "toolCeiling": ["terminal", "file", "web"],
  "roles": {
    "chat": {"harness": "direct", "route": "work", "tools": []},
    "research": {"harness": "direct", "route": "work", "tools": ["web"]},
    "coding": {"harness": "direct", "route": "work", "tools": ["terminal", "file"], "labels": ["coder"]}
  }
}`
	env := functionstest.New(t, functionstest.Options{Bootstrap: boot})
	ctx := context.Background()
	alice, aliceJWT := env.SignUp(t, "alice@example.com", "password-alice")
	env.Label(t, alice, "member", "coder")
	bob, bobJWT := env.SignUp(t, "bob@example.com", "password-bob")
	runs := schema.For[schema.Run](env.Store, schema.CollRuns)

	// Each user's coordinating run, admitted by the web (labels verified from the JWT).
	coordinator := func(jwt string) (run, conv string) {
		conv = env.Conversation(t, jwt)
		r := env.Do(t, "POST", "/api/conversations/"+conv+"/messages", jwt, map[string]any{"requestId": "coord", "text": "plan the work"})
		require.Equal(t, 202, r.Status, "%s", r.Body)
		var res struct{ RunID string }
		r.JSON(t, &res)
		require.NotEmpty(t, res.RunID)
		return res.RunID, conv
	}
	aliceRun, aliceConv := coordinator(aliceJWT)
	bobRun, bobConv := coordinator(bobJWT)
	ar, err := runs.Get(ctx, aliceRun)
	require.NoError(t, err)
	require.Equal(t, []string{"coder", "member"}, ar.OwnerLabels, "the web's admission keeps the verified labels")
	br, err := runs.Get(ctx, bobRun)
	require.NoError(t, err)
	require.Equal(t, []string{"member"}, br.OwnerLabels)

	// A run recorded before the field existed: no ownerLabels.
	legacy := "rlegacy0000000000000000000000000"
	_, err = runs.Create(ctx, legacy, alice, &schema.Run{OwnerID: alice, ConversationID: aliceConv, MessageID: "mlegacy", RequestID: "legacy",
		Role: "chat", Status: runstate.Initial, QueuedAt: time.Now().UTC().Format(time.RFC3339Nano)})
	require.NoError(t, err)

	rdb := env.Redis.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	aq := asynq.NewClientFromRedisClient(rdb)
	t.Cleanup(func() { _ = aq.Close() })
	adm := &admit.Admitter{RDB: rdb, Enq: queue.NewEnqueuer(aq), Plans: &runconfig.Cache{RDB: rdb}}
	reg := &Registry{RDB: rdb, Server: "pa"}
	srv := &Server{Registry: reg, Key: testKey, MatchWait: 200 * time.Millisecond,
		// As agent/daemon reads it: the run record, nothing the model can touch.
		Runs: func(ctx context.Context, run string) (Caller, error) {
			r, err := runs.Get(ctx, run)
			if err != nil {
				return Caller{}, err
			}
			return CallerOf(run, r), nil
		},
		Admit: func(ctx context.Context, req admit.Request) (admit.Result, error) {
			return adm.Admit(ctx, env.Store, req)
		},
		State: func(context.Context, string) (RunState, error) { return RunState{Status: "queued"}, nil }}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	s := &setup{reg: reg, url: hs.URL + "/mcp"}
	cs := s.session(t)

	// Alice carries the label: the restricted role is admitted into her conversation.
	args := map[string]any{"role": "coding", "instructions": "fix the tests (alice)"}
	s.model(t, aliceRun, "call_1", "enqueue_job", args)
	out, msg := call(t, cs, "enqueue_job", args)
	require.Empty(t, msg)
	want, _ := admit.IDs(alice, RequestID(aliceRun, "call_1"))
	require.Equal(t, want, out["job"])
	job, err := runs.Get(ctx, want)
	require.NoError(t, err)
	require.Equal(t, "coding", job.Role)
	require.Equal(t, aliceConv, job.ConversationID)
	require.Nil(t, job.OwnerLabels, "carried labels are not kept: staleness ends with the coordinator")

	// So the job's own delegation to the restricted role is refused.
	jargs := map[string]any{"role": "coding", "instructions": "fix the tests (nested)"}
	s.model(t, job.ID, "call_1", "enqueue_job", jargs)
	_, msg = call(t, cs, "enqueue_job", jargs)
	require.Contains(t, msg, `you may not use the "coding" role`)

	// Bob does not: refused by admission, as a tool error, nothing admitted.
	bargs := map[string]any{"role": "coding", "instructions": "fix the tests (bob)"}
	s.model(t, bobRun, "call_1", "enqueue_job", bargs)
	_, msg = call(t, cs, "enqueue_job", bargs)
	require.Contains(t, msg, `you may not use the "coding" role`, "the refusal reaches the model as a tool error")
	refused, _ := admit.IDs(bob, RequestID(bobRun, "call_1"))
	_, err = runs.Get(ctx, refused)
	require.ErrorIs(t, err, schema.ErrNotFound, "nothing is admitted")

	// A run recorded without labels falls back to refusing restricted roles, even for Alice.
	largs := map[string]any{"role": "coding", "instructions": "fix the tests (legacy)"}
	s.model(t, legacy, "call_1", "enqueue_job", largs)
	_, msg = call(t, cs, "enqueue_job", largs)
	require.Contains(t, msg, `you may not use the "coding" role`)
	refused, _ = admit.IDs(alice, RequestID(legacy, "call_1"))
	_, err = runs.Get(ctx, refused)
	require.ErrorIs(t, err, schema.ErrNotFound)

	// An open role works for a user without the label.
	open := map[string]any{"role": "research", "instructions": "compare GPUs"}
	s.model(t, bobRun, "call_2", "enqueue_job", open)
	out, msg = call(t, cs, "enqueue_job", open)
	require.Empty(t, msg)
	want, _ = admit.IDs(bob, RequestID(bobRun, "call_2"))
	require.Equal(t, want, out["job"])
	job, err = runs.Get(ctx, want)
	require.NoError(t, err)
	require.Equal(t, "research", job.Role)
	require.Equal(t, bobConv, job.ConversationID)
}

// A job delegated by a run of a staging app is planned on staging's release, one
// delegated by a production run on production's (issue 35 item 3: staging and production
// never mix): admission records the run's environment, the caller carries it, the job's
// admission uses it and records it in turn, so the job's own delegations stay there.
func TestADelegatedJobRunsInItsCoordinatorsEnvironment(t *testing.T) {
	env := functionstest.New(t)
	ctx := context.Background()
	adminID, admin := env.SignUp(t, "deleg-admin@example.com", "password-deleg-admin")
	env.Label(t, adminID, "member", "admin")
	member, memberJWT := env.SignUp(t, "deleg-member@example.com", "password-deleg-member")

	// Release 2 puts chat on the work route; staging runs it, production keeps release 1 (chat route).
	work := map[string]any{"harness": "direct", "harnessRevision": 1, "route": "work", "routeRevision": 1, "tools": []string{}}
	res := env.Do(t, "PUT", "/api/harness-selection", admin, map[string]any{"propose": true, "expectedRevision": 1,
		"roles": map[string]any{"chat": work, "research": work, "coding": work}})
	require.Equal(t, 200, res.Status, string(res.Body))
	res = env.Do(t, "POST", "/api/releases/2/evidence", admin, map[string]any{})
	require.Equal(t, 200, res.Status, string(res.Body))
	res = env.Do(t, "POST", "/api/releases/2/promote", admin, map[string]any{"environment": "staging"})
	require.Equal(t, 200, res.Status, string(res.Body))

	runs := schema.For[schema.Run](env.Store, schema.CollRuns)
	conv := env.Conversation(t, memberJWT)
	staging := "staging"
	coordinator := func(id string, environment *string) {
		_, err := runs.Create(ctx, id, member, &schema.Run{OwnerID: member, ConversationID: conv, MessageID: "m" + id[1:], RequestID: "req-" + id,
			Role: "research", Status: runstate.Initial, QueuedAt: time.Now().UTC().Format(time.RFC3339Nano), Environment: environment})
		require.NoError(t, err)
	}
	stagingRun, prodRun := "rstaging000000000000000000000000", "rproduction000000000000000000000"
	coordinator(stagingRun, &staging)
	coordinator(prodRun, nil)

	rdb := env.Redis.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	aq := asynq.NewClientFromRedisClient(rdb)
	t.Cleanup(func() { _ = aq.Close() })
	adm := &admit.Admitter{RDB: rdb, Enq: queue.NewEnqueuer(aq), Plans: &runconfig.Cache{RDB: rdb}}
	reg := &Registry{RDB: rdb, Server: "pa"}
	srv := &Server{Registry: reg, Key: testKey, MatchWait: 200 * time.Millisecond,
		Runs: func(ctx context.Context, run string) (Caller, error) {
			r, err := runs.Get(ctx, run)
			if err != nil {
				return Caller{}, err
			}
			return CallerOf(run, r), nil
		},
		Admit: func(ctx context.Context, req admit.Request) (admit.Result, error) {
			return adm.Admit(ctx, env.Store, req)
		},
		State: func(context.Context, string) (RunState, error) { return RunState{Status: "queued"}, nil }}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	s := &setup{reg: reg, url: hs.URL + "/mcp"}
	cs := s.session(t)

	delegate := func(run, callID string) *schema.Run {
		t.Helper()
		args := map[string]any{"role": "chat", "instructions": "summarise the notes (" + run + ")"}
		s.model(t, run, callID, "enqueue_job", args)
		out, msg := call(t, cs, "enqueue_job", args)
		require.Empty(t, msg)
		job, err := runs.Get(ctx, out["job"].(string))
		require.NoError(t, err)
		return job
	}
	routeOf := func(run string) string {
		t.Helper()
		b, err := schema.For[schema.RunBinding](env.Store, schema.CollRunBindings).List(ctx, schema.ListQuery{
			Filters: []string{query.Equal("runId", run)}, Limit: 1})
		require.NoError(t, err)
		require.Len(t, b.Items, 1)
		return b.Items[0].RouteID
	}
	job := delegate(stagingRun, "call_1")
	require.Equal(t, "work", routeOf(job.ID), "a staging run's job runs staging's release")
	require.NotNil(t, job.Environment)
	require.Equal(t, "staging", *job.Environment, "and is recorded there, so its own jobs stay there")
	nested := delegate(job.ID, "call_1")
	require.Equal(t, "work", routeOf(nested.ID))

	job = delegate(prodRun, "call_1")
	require.Equal(t, "chat", routeOf(job.ID), "a production run's job runs production's release")
	require.Nil(t, job.Environment)
}
