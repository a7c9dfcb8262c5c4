package runconfig_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/queue/redistest"
	"privateassistant/runconfig"
	"privateassistant/schema"
	"privateassistant/schema/schematest"
)

func bootstrapFile(t *testing.T) *runconfig.BootstrapFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "deploy", "bootstrap.example.json"))
	require.NoError(t, err)
	f, err := runconfig.ParseBootstrap(b)
	require.NoError(t, err)
	return f
}

func TestEffectiveToolsCanOnlyNarrow(t *testing.T) {
	t.Parallel()
	ceiling := []string{"web", "file", "terminal"}
	require.Equal(t, []string{"file", "terminal", "web"}, runconfig.EffectiveTools(ceiling, nil))
	require.Equal(t, []string{}, runconfig.EffectiveTools(ceiling, []string{}))
	require.Equal(t, []string{"web"}, runconfig.EffectiveTools(ceiling, []string{"web", "web", "deploy", "shell"}))
	require.Equal(t, []string{}, runconfig.EffectiveTools(nil, []string{"web"}))
	// Exhaustively: the result is always a subset of both.
	all := []string{"a", "b", "c", "d"}
	for m1 := 0; m1 < 16; m1++ {
		for m2 := 0; m2 < 16; m2++ {
			var c []string
			n := []string{}
			for i, x := range all {
				if m1&(1<<i) != 0 {
					c = append(c, x)
				}
				if m2&(1<<i) != 0 {
					n = append(n, x)
				}
			}
			for _, x := range runconfig.EffectiveTools(c, n) {
				require.Contains(t, c, x)
				require.Contains(t, n, x)
			}
		}
	}
}

func TestBootstrapResolveAndCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := schematest.New(t)
	_, err := runconfig.Resolve(ctx, env.Store, "chat")
	require.ErrorIs(t, err, runconfig.ErrNotConfigured)

	require.NoError(t, runconfig.Bootstrap(ctx, env.Store, bootstrapFile(t), "operator"))
	require.ErrorIs(t, runconfig.Bootstrap(ctx, env.Store, bootstrapFile(t), "operator"), runconfig.ErrAlreadyBootstrapped)

	// The example binds research to Hermes, unverified at bootstrap: it resolves only once
	// an admin's validation has marked the profile verified.
	_, err = runconfig.Resolve(ctx, env.Store, "research")
	require.ErrorIs(t, err, runconfig.ErrUnverified)
	hp := schema.For[schema.HarnessProfile](env.Store, schema.CollHarnessProfiles)
	_, err = hp.Update(ctx, runconfig.RevisionDocID("hermes", 1), map[string]any{
		"verified": true, "verifiedAt": time.Now().UTC().Format(time.RFC3339Nano)})
	require.NoError(t, err)

	// Release 1 is live before its evidence: its roles are held until it passes.
	_, err = runconfig.Resolve(ctx, env.Store, "research")
	require.ErrorIs(t, err, runconfig.ErrUnchecked)
	require.ErrorContains(t, err, "being checked")
	rels := schema.For[schema.Release](env.Store, schema.CollReleases)
	_, err = rels.Update(ctx, runconfig.RevisionDocID("release", 1), map[string]any{"state": schema.ReleaseReady})
	require.NoError(t, err)

	p, err := runconfig.Resolve(ctx, env.Store, "research")
	require.NoError(t, err)
	require.Equal(t, "gpu:xtx", p.Queue)
	require.Equal(t, []string{"file", "terminal", "web"}, p.Tools)
	require.Len(t, p.ReleaseFingerprint, 64)
	require.Len(t, p.Fingerprint, 64)
	chat, err := runconfig.Resolve(ctx, env.Store, "chat")
	require.NoError(t, err)
	require.Equal(t, []string{}, chat.Tools)
	require.NotEqual(t, p.Fingerprint, chat.Fingerprint)
	_, err = runconfig.Resolve(ctx, env.Store, "poetry")
	require.ErrorIs(t, err, runconfig.ErrUnknownRole)

	// An unverified hermes profile: a role bound to it cannot be resolved.
	_, err = hp.Update(ctx, runconfig.RevisionDocID("hermes", 1), map[string]any{"verified": false, "verifiedAt": nil})
	require.NoError(t, err)
	settings := schema.For[schema.Settings](env.Store, schema.CollSettings)
	_, err = settings.UpdateRevision(ctx, runconfig.SystemSettingsID, 1, map[string]any{
		"roles": `{"chat":{"harness":"hermes","harnessRevision":1,"route":"chat","routeRevision":1}}`})
	require.NoError(t, err)
	_, err = runconfig.Resolve(ctx, env.Store, "chat")
	require.ErrorIs(t, err, runconfig.ErrUnverified)

	// Cache: a warm Get makes no Appwrite request at all.
	r := redistest.Start(t)
	rdb := r.Client()
	defer rdb.Close()
	_, err = settings.UpdateRevision(ctx, runconfig.SystemSettingsID, 2, map[string]any{
		"roles": `{"chat":{"harness":"direct","harnessRevision":1,"route":"chat","routeRevision":1}}`})
	require.NoError(t, err)
	cache := &runconfig.Cache{RDB: rdb}
	st, cnt := env.CountingStore()
	p1, hit, err := cache.Get(ctx, st, "chat")
	require.NoError(t, err)
	require.False(t, hit)
	require.Equal(t, p1.ReleaseFingerprint, rdb.Get(ctx, "pa:plan:current").Val(), "the pointer names the live release")
	require.Equal(t, "3", rdb.Get(ctx, "pa:plan:current:rev").Val())
	require.Positive(t, cnt.Reads())
	cnt.Reset()
	p2, hit, err := cache.Get(ctx, st, "chat")
	require.NoError(t, err)
	require.True(t, hit)
	require.Equal(t, p1, p2)
	require.Zero(t, cnt.Reads()+cnt.Writes(), "a cache hit performs no configuration reads")

	// The pointer only moves forward with the live pointer's revision (a rollback to an
	// earlier release is a later revision too).
	require.NoError(t, cache.MovePointer(ctx, 2, "older"))
	require.Equal(t, p1.ReleaseFingerprint, rdb.Get(ctx, "pa:plan:current").Val())
	require.NoError(t, cache.MovePointer(ctx, 4, "other"))
	_, hit, err = cache.Get(ctx, st, "chat")
	require.NoError(t, err)
	require.False(t, hit, "release \"other\" has no cached plan yet")
}

func TestBootstrapFileChecks(t *testing.T) {
	t.Parallel()
	_, err := runconfig.ParseBootstrap([]byte(`{"harnesses":[{"profileId":"h","kind":"direct","baseUrl":"http://x","keyRef":"sk-abcdefabcdefabcdef0123456789"}],"routes":[],"roles":{}}`))
	require.ErrorContains(t, err, "looks like a secret")
	_, err = runconfig.ParseBootstrap([]byte(`{"harnesses":[],"routes":[],"roles":{"chat":{"harness":"x","route":"y"}}}`))
	require.ErrorContains(t, err, "unknown harness")
	_, err = runconfig.ParseBootstrap([]byte(`{"unknown":1}`))
	require.Error(t, err)
	require.False(t, runconfig.LooksLikeSecret("HERMES_API_KEY"))
	require.False(t, runconfig.LooksLikeSecret("env:GATEWAY_API_KEY"))
	require.True(t, runconfig.LooksLikeSecret("a3f9c2e1b7d4a6f8c0e2b4d6f8a1c3e5"))
	require.True(t, runconfig.LooksLikeSecret("key with spaces"))
	require.Equal(t, "direct.r1", runconfig.RevisionDocID("direct", 1))
	require.Len(t, runconfig.RevisionDocID("a-very-long-profile-id-that-is-36chr", 12), 36)
}

// TestHoldFollowsTheEvidence: while the live release's evidence has not passed, a role's
// route is served only where that evidence cleared it (passed, not needed, not checked);
// one it found unqualified waits for its qualification; one with a passing qualification
// of its own needs no evidence at all.
func TestHoldFollowsTheEvidence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := schematest.New(t)
	require.NoError(t, runconfig.Bootstrap(ctx, env.Store, bootstrapFile(t), "operator"))
	relID := runconfig.RevisionDocID("release", 1)
	route, err := runconfig.RouteRevision(ctx, env.Store, "work", 1)
	require.NoError(t, err)
	rels := schema.For[schema.Release](env.Store, schema.CollReleases)
	for q, held := range map[string]string{
		"passed: 131072 tokens":                   "",
		"not needed: no agent manages xtx":        "",
		"not checked: no qualification gate here": "",
		"route is not qualified: never qualified": "waiting for its GPU qualification",
		"not needed: already live for a role":     "",
	} {
		ev := `{"passed":false,"routes":[{"id":"work","revision":1,"qualification":` + strconv.Quote(q) + `}]}`
		_, err := rels.Update(ctx, relID, map[string]any{"state": schema.ReleaseFailed, "evidence": ev})
		require.NoError(t, err)
		err = runconfig.Hold(ctx, env.Store, relID, route)
		if held == "" {
			require.NoError(t, err, q)
		} else {
			require.ErrorIs(t, err, runconfig.ErrUnchecked, q)
			require.ErrorContains(t, err, held)
		}
	}
	// Evidence that does not name the route: still being checked.
	_, err = rels.Update(ctx, relID, map[string]any{"evidence": `{"routes":[]}`})
	require.NoError(t, err)
	require.ErrorContains(t, runconfig.Hold(ctx, env.Store, relID, route), "being checked")
}
