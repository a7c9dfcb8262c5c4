package settings_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionstest"
	"privateassistant/runconfig"
	"privateassistant/schema"
	"privateassistant/schema/schematest"
	"privateassistant/settings"
)

// killer is a transport that kills its own process (SIGKILL, no deferred code runs) right
// after the response to write number after (counting from 1) arrived: the write landed,
// nothing after it did. It counts the writes it saw.
type killer struct {
	after, writes int
	base          *http.Transport
}

func (k *killer) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := k.base.RoundTrip(r)
	if r.Method != http.MethodGet {
		k.writes++
		if k.writes == k.after {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			time.Sleep(time.Minute)
		}
	}
	return resp, err
}

// changeChat is the mutation the crash test makes: the chat role moves to the work route.
func changeChat() settings.SelectionInput {
	return settings.SelectionInput{ExpectedRevision: 1, Roles: map[string]runconfig.RoleBinding{
		"chat":     {Harness: "direct", HarnessRevision: 1, Route: "work", RouteRevision: 1, Tools: []string{}},
		"research": {Harness: "direct", HarnessRevision: 1, Route: "work", RouteRevision: 1, Tools: []string{"web"}},
		"coding":   {Harness: "direct", HarnessRevision: 1, Route: "work", RouteRevision: 1, Tools: []string{"terminal", "file"}},
	}}
}

// TestKillHelperProcess is the process TestKillAtEveryStep kills: it runs the whole
// sequence (candidate + plan + operation + outbox, audit; the reconciler's lease,
// evidence, audit; approval, live pointer, audit, promotion mark) against the parent's
// emulator and is killed after write PA_KILL_AFTER. Skipped unless started by the test.
func TestKillHelperProcess(t *testing.T) {
	if os.Getenv("PA_KILL_ENDPOINT") == "" {
		t.Skip("started by TestKillAtEveryStep")
	}
	after, _ := strconv.Atoi(os.Getenv("PA_KILL_AFTER"))
	k := &killer{after: after, base: http.DefaultTransport.(*http.Transport).Clone()}
	defer k.base.CloseIdleConnections()
	c := appwrite.NewClient(appwrite.WithEndpoint(os.Getenv("PA_KILL_ENDPOINT")), appwrite.WithProject(os.Getenv("PA_KILL_PROJECT")), appwrite.WithKey(os.Getenv("PA_KILL_KEY")))
	c.Client = &http.Client{Timeout: 10 * time.Second, Transport: k}
	a := admin(schema.NewStore(c, schema.Definition("")))
	_, err := a.CommitSelection(context.Background(), "admin1", changeChat())
	require.NoError(t, err)
	fmt.Printf("WRITES %d\n", k.writes)
}

func runKilled(t *testing.T, env *schematest.Env, after int) (string, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PA_KILL_ENDPOINT="+env.TS.URL, "PA_KILL_PROJECT="+env.TS.Project, "PA_KILL_KEY="+env.RuntimeKey,
		"PA_KILL_AFTER="+strconv.Itoa(after))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// TestKillAtEveryStep kills the process that makes and promotes a change after each of
// its writes in turn, and shows nothing half-done: the live configuration is at every
// point either the old release or the new one, whole (its content is the content of the
// release it names); and once the reconciler's pass (Repair) ran, either nothing of the
// change exists or the candidate exists with its audit entry, and finishing the operation
// (promote again) leaves it live with every record in place.
func TestKillAtEveryStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// An uninterrupted run counts the writes.
	env := bootstrappedEnv(t)
	out, err := runKilled(t, env, -1)
	require.NoError(t, err, out)
	m := regexp.MustCompile(`WRITES (\d+)`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	total, _ := strconv.Atoi(m[1])
	require.Greater(t, total, 8, "the sequence has its steps")
	checkWhole(t, env.Store)

	for after := 1; after <= total; after++ {
		env := bootstrappedEnv(t)
		out, err := runKilled(t, env, after)
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "killed after write %d: %v\n%s", after, err, out)
		require.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal(), "write %d", after)

		a := admin(env.Store)
		live := liveRelease(t, env.Store) // whole before any repair
		_, err = a.Release(ctx, 2)
		candidate := err == nil
		if !candidate {
			require.Equal(t, settings.ReleaseID(1), live, "write %d: nothing happened, nothing is live", after)
		}

		// The reconciler's pass repairs and collects; the operation is then finished.
		// (its clock past the dead process's lease).
		rec := &settings.Reconciler{Admin: a, Holder: "recovery", Now: func() time.Time { return time.Now().Add(3 * time.Minute) }}
		require.NoError(t, rec.Pass(ctx), "write %d", after)
		if !candidate {
			_, err := schema.For[schema.Audit](env.Store, schema.CollAudit).Get(ctx, settings.AuditID("release/2", 2))
			require.ErrorIs(t, err, schema.ErrNotFound, "write %d: no audit of a change that does not exist", after)
			h, err := a.Head(ctx)
			require.NoError(t, err)
			require.EqualValues(t, 1, h.Seq)
			continue
		}
		_, err = schema.For[schema.Audit](env.Store, schema.CollAudit).Get(ctx, settings.AuditID("release/2", 2))
		require.NoError(t, err, "write %d: the candidate's audit entry is repaired", after)
		if live != settings.ReleaseID(2) {
			_, err = a.Promote(ctx, "admin1", 2)
			require.NoError(t, err, "write %d", after)
		}
		require.NoError(t, a.Repair(ctx))
		checkWhole(t, env.Store)
	}
}

func bootstrappedEnv(t *testing.T) *schematest.Env {
	env := schematest.New(t)
	f, err := runconfig.ParseBootstrap([]byte(functionstest.Bootstrap))
	require.NoError(t, err)
	require.NoError(t, runconfig.Bootstrap(context.Background(), env.Store, f, "test"))
	return env
}

// liveRelease checks the live pointer is whole and names the release it serves.
func liveRelease(t *testing.T, st *schema.Store) string {
	t.Helper()
	ctx := context.Background()
	s, err := schema.For[schema.Settings](st, schema.CollSettings).Get(ctx, runconfig.SystemSettingsID)
	require.NoError(t, err)
	require.NotNil(t, s.Release)
	r, err := schema.For[schema.Release](st, schema.CollReleases).Get(ctx, *s.Release)
	require.NoError(t, err)
	c, err := runconfig.ContentOf(s)
	require.NoError(t, err)
	require.Equal(t, r.Fingerprint, c.Fingerprint(), "the live content is the content of the release it names")
	return *s.Release
}

// checkWhole: release 2 is live with its evidence, approval, promotion mark and both
// audit entries.
func checkWhole(t *testing.T, st *schema.Store) {
	t.Helper()
	ctx := context.Background()
	require.Equal(t, settings.ReleaseID(2), liveRelease(t, st))
	r, err := schema.For[schema.Release](st, schema.CollReleases).Get(ctx, settings.ReleaseID(2))
	require.NoError(t, err)
	require.Equal(t, schema.ReleaseReady, r.State)
	require.NotNil(t, r.Evidence)
	require.NotNil(t, r.PromotedAt, "the promotion mark")
	require.Contains(t, *r.Approvals, `"by":"admin1"`)
	audit := schema.For[schema.Audit](st, schema.CollAudit)
	_, err = audit.Get(ctx, settings.AuditID("release/2", 2))
	require.NoError(t, err)
	_, err = audit.Get(ctx, settings.AuditID("settings/"+runconfig.SystemSettingsID, 2))
	require.NoError(t, err)
}
