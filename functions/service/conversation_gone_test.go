package service_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/appwrite/sdk-for-go/file"
	"github.com/appwrite/sdk-for-go/permission"
	"github.com/appwrite/sdk-for-go/query"
	"github.com/appwrite/sdk-for-go/role"
	"github.com/appwrite/sdk-for-go/storage"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"privateassistant/agent/artifacts"
	"privateassistant/agent/executor"
	"privateassistant/functions/functionstest"
	"privateassistant/queue"
	"privateassistant/schema"
)

// Issue 30 item 6, deleting is deleting: after a conversation is deleted its runs read
// exactly like another user's (the list by conversation, the list of all runs, a run,
// its events, cancel, approval, a cursor), its artifacts (records and files) are gone,
// and so are its uploads that no other message of the owner names; nothing of it is
// readable through Appwrite's own API (/v1) with the owner's session either.
func TestADeletedConversationLeavesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := functionstest.New(t)
	alice, ajwt := env.SignUp(t, "gone-alice@example.com", "password-alice")
	_, mjwt := env.SignUp(t, "gone-mallory@example.com", "password-mallory")
	admin := appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL), appwrite.WithProject(env.TS.Project), appwrite.WithKey(env.TS.AdminKey))
	files := appwrite.NewStorage(admin)
	dir := t.TempDir()
	upload := func(id string) {
		t.Helper()
		p := filepath.Join(dir, id+".txt")
		require.NoError(t, os.WriteFile(p, []byte("the secret word is "+id), 0o600))
		st := storage.New(appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL), appwrite.WithProject(env.TS.Project), appwrite.WithJWT(ajwt)))
		_, err := st.CreateFile(schema.BucketUploads, id, file.NewInputFile(p, id+".txt"),
			st.WithCreateFilePermissions([]string{permission.Read(role.User(alice, ""))}))
		require.NoError(t, err)
	}
	upload("only-here")
	upload("also-kept")

	gone, kept := env.Conversation(t, ajwt), env.Conversation(t, ajwt)
	send := func(conv, req string, att ...string) admitted {
		t.Helper()
		res := env.Do(t, "POST", "/api/conversations/"+conv+"/messages", ajwt, map[string]any{"requestId": req, "text": "hello", "attachments": att})
		require.Equal(t, 202, res.Status, string(res.Body))
		var a admitted
		res.JSON(t, &a)
		return a
	}
	runGone := send(gone, "g1", "only-here", "also-kept")
	runKept := send(kept, "k1", "also-kept")
	foreignConv := env.Conversation(t, mjwt)
	foreignRun := admitOne(t, env, mjwt, foreignConv, "m1")

	// The gone conversation's run wrote an answer and a file.
	for _, a := range []admitted{runGone, runKept} {
		run, err := schema.For[schema.Run](env.Store, schema.CollRuns).Get(ctx, a.RunID)
		require.NoError(t, err)
		_, err = executor.StoreAnswer(ctx, env.Store, rdbOf(t, env), run, "the answer of "+a.RunID)
		require.NoError(t, err)
		out := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(out, "notes.md"), []byte("notes of "+a.RunID), 0o600))
		arts, _, err := (&artifacts.Uploader{Store: env.Store}).UploadDir(ctx, out, run)
		require.NoError(t, err)
		require.Len(t, arts, 1)
	}
	artsOf := func(conv string) []schema.Artifact {
		list, err := schema.For[schema.Artifact](env.Store, schema.CollArtifacts).All(ctx, schema.ListQuery{Owner: alice, Filters: []string{query.Equal("conversationId", conv)}})
		require.NoError(t, err)
		return list
	}
	goneArt := artsOf(gone)
	require.Len(t, goneArt, 1)

	res := env.Do(t, "DELETE", "/api/conversations/"+gone, ajwt, nil)
	require.Equal(t, 204, res.Status, string(res.Body))

	same := func(what, deleted, foreign string, method ...string) {
		t.Helper()
		m := "GET"
		var body any
		if len(method) > 0 {
			m, body = method[0], map[string]any{"requestId": "x", "choice": "deny"}
			if method[0] == "POST" && len(method) > 1 && method[1] == "cancel" {
				body = map[string]any{}
			}
		}
		d, f := env.Do(t, m, deleted, ajwt, body), env.Do(t, m, foreign, ajwt, body)
		require.Equal(t, f.Status, d.Status, "%s: %s / %s", what, d.Body, f.Body)
		require.Equal(t, requestIDField.ReplaceAllString(string(f.Body), ""), requestIDField.ReplaceAllString(string(d.Body), ""), "%s reads exactly like another user's", what)
	}
	same("the runs of the conversation", "/api/runs?conversationId="+gone, "/api/runs?conversationId="+foreignConv)
	same("a run", "/api/runs/"+runGone.RunID, "/api/runs/"+foreignRun.RunID)
	same("its events", "/api/runs/"+runGone.RunID+"/events?after=0&wait=0", "/api/runs/"+foreignRun.RunID+"/events?after=0&wait=0")
	same("a cursor", "/api/runs?cursor="+runGone.RunID, "/api/runs?cursor="+foreignRun.RunID)
	same("cancel", "/api/runs/"+runGone.RunID+"/cancel", "/api/runs/"+foreignRun.RunID+"/cancel", "POST", "cancel")
	same("approval", "/api/runs/"+runGone.RunID+"/approval", "/api/runs/"+foreignRun.RunID+"/approval", "POST")
	same("its artifacts", "/api/artifacts?conversationId="+gone, "/api/artifacts?conversationId="+foreignConv)
	same("an artifact", "/api/artifacts/"+goneArt[0].ID+"/download", "/api/artifacts/fnosuchartifact/download")

	res = env.Do(t, "GET", "/api/runs", ajwt, nil)
	require.Equal(t, 200, res.Status, string(res.Body))
	var all struct {
		Runs []struct{ ID string }
		Next *string
	}
	res.JSON(t, &all)
	require.Len(t, all.Runs, 1, "only the kept conversation's run is listed: %s", res.Body)
	require.Equal(t, runKept.RunID, all.Runs[0].ID)

	// Artifacts and uploads: the gone conversation's are deleted, records and files.
	require.Empty(t, artsOf(gone))
	require.Len(t, artsOf(kept), 1)
	_, err := files.GetFile(schema.BucketArtifacts, goneArt[0].FileID)
	require.Error(t, err, "the artifact's file is deleted")
	_, err = files.GetFile(schema.BucketUploads, "only-here")
	require.Error(t, err, "an attachment no other message names is deleted")
	_, err = files.GetFile(schema.BucketUploads, "also-kept")
	require.NoError(t, err, "an attachment another message still names stays")

	// Nothing of it through Appwrite's own API with alice's session.
	requireNothingReadable(t, env, ajwt, gone, runGone.RunID)

	// Once the cached owners have expired (30 days; or Redis lost them), the records say
	// the same: the gone conversation's record is missing, the kept one's is there.
	rdb := rdbOf(t, env)
	require.NoError(t, rdb.Del(ctx, queue.ConvOwnerKey(gone), queue.ConvOwnerKey(kept), queue.RunOwnerKey(runGone.RunID)).Err())
	same("the runs of the conversation, uncached", "/api/runs?conversationId="+gone, "/api/runs?conversationId="+foreignConv)
	same("a run, uncached", "/api/runs/"+runGone.RunID, "/api/runs/"+foreignRun.RunID)
	same("its events, uncached", "/api/runs/"+runGone.RunID+"/events?after=0&wait=0", "/api/runs/"+foreignRun.RunID+"/events?after=0&wait=0")
	res = env.Do(t, "GET", "/api/runs", ajwt, nil)
	require.Equal(t, 200, res.Status, string(res.Body))
	res.JSON(t, &all)
	require.Len(t, all.Runs, 1, "uncached: only the kept conversation's run is listed: %s", res.Body)
	require.Equal(t, runKept.RunID, all.Runs[0].ID)
	require.Equal(t, 200, env.Do(t, "GET", "/api/runs/"+runKept.RunID+"/events?after=0&wait=0", ajwt, nil).Status)
}

// A run's answer and files written while its conversation is being deleted (a cancelled
// run's partial answer arriving just after the delete) never stay: the agent writes, then
// looks for the delete's mark (agent/executor DropLateWrites), and the delete marks, then
// lists. Raced many times, each at a different point of the delete.
func TestLateAnswersOfADeletedConversationAreDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := functionstest.New(t)
	rdb := rdbOf(t, env)
	up := &artifacts.Uploader{Store: env.Store}
	const rounds = 30
	var jwt string
	for i := range rounds {
		if i%10 == 0 { // a user makes at most 20 conversations a minute
			_, jwt = env.SignUp(t, fmt.Sprintf("late%d@example.com", i), "password-late")
		}
		conv := env.Conversation(t, jwt)
		a := admitOne(t, env, jwt, conv, fmt.Sprintf("late-%d", i))
		run, err := schema.For[schema.Run](env.Store, schema.CollRuns).Get(ctx, a.RunID)
		require.NoError(t, err)
		out := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(out, "partial.md"), []byte("half of it"), 0o600))

		start := make(chan struct{})
		var wg sync.WaitGroup
		var delStatus int
		var writeErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			delStatus = env.Do(t, "DELETE", "/api/conversations/"+conv, jwt, nil).Status
		}()
		go func() {
			defer wg.Done()
			<-start
			// The executor's finish: files, then the answer, then the check (finish.go).
			if _, _, err := up.UploadDir(ctx, out, run); err != nil {
				writeErr = err
				return
			}
			if _, err := executor.StoreAnswer(ctx, env.Store, rdb, run, "a partial answer"); err != nil && !errors.Is(err, executor.ErrConversationDeleted) {
				writeErr = err
				return
			}
			_, writeErr = executor.DropLateWrites(ctx, env.Store, rdb, run)
		}()
		close(start)
		wg.Wait()
		require.Equal(t, 204, delStatus)
		require.NoError(t, writeErr)

		_, err = schema.For[schema.Message](env.Store, schema.CollMessages).Get(ctx, executor.AssistantMessageID(a.RunID))
		require.ErrorIs(t, err, schema.ErrNotFound, "round %d: the late answer is gone", i)
		arts, err := schema.For[schema.Artifact](env.Store, schema.CollArtifacts).All(ctx, schema.ListQuery{AllOwners: true, Filters: []string{query.Equal("runId", a.RunID)}})
		require.NoError(t, err)
		require.Empty(t, arts, "round %d: the late artifact is gone", i)
		_, err = appwrite.NewStorage(appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL), appwrite.WithProject(env.TS.Project), appwrite.WithKey(env.TS.AdminKey))).
			GetFile(schema.BucketArtifacts, artifacts.FileID(a.RunID, "partial.md"))
		require.Error(t, err, "round %d: the late artifact's file is gone", i)
		res := env.Do(t, "GET", "/api/runs?conversationId="+conv, jwt, nil)
		require.JSONEq(t, `{"runs":[],"next":""}`, string(res.Body), "round %d", i)
		requireNothingReadable(t, env, jwt, conv, a.RunID)
	}
}

// requireNothingReadable: nothing of conversation conv (nor run's record) is readable
// through Appwrite's own API with the owner's session.
func requireNothingReadable(t *testing.T, env *functionstest.Env, jwt, conv, run string) {
	t.Helper()
	db := appwrite.NewDatabases(appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL), appwrite.WithProject(env.TS.Project), appwrite.WithJWT(jwt)))
	for _, coll := range []string{schema.CollMessages, schema.CollArtifacts} {
		list, err := db.ListDocuments(env.Model.DatabaseID, coll, db.WithListDocumentsQueries([]string{query.Equal("conversationId", conv)}))
		require.NoError(t, err)
		require.Zero(t, list.Total, "%s of the deleted conversation listed through /v1", coll)
	}
	_, err := db.GetDocument(env.Model.DatabaseID, schema.CollMessages, executor.AssistantMessageID(run))
	require.Error(t, err, "the answer is not readable through /v1")
	_, err = db.GetDocument(env.Model.DatabaseID, schema.CollConversations, conv)
	require.Error(t, err)
	st := storage.New(appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL), appwrite.WithProject(env.TS.Project), appwrite.WithJWT(jwt)))
	_, err = st.GetFile(schema.BucketArtifacts, artifacts.FileID(run, "partial.md"))
	require.Error(t, err)
}

func rdbOf(t *testing.T, env *functionstest.Env) *redis.Client {
	t.Helper()
	c := env.Redis.Client()
	t.Cleanup(func() { _ = c.Close() })
	return c
}
