package service_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/appwrite/sdk-for-go/file"
	"github.com/appwrite/sdk-for-go/permission"
	"github.com/appwrite/sdk-for-go/role"
	"github.com/appwrite/sdk-for-go/storage"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionstest"
	"privateassistant/queue"
	"privateassistant/schema"
)

// Issue 17 item 5: a message may carry files its author uploaded to the uploads bucket
// with their own session. Admission accepts only the caller's own, complete, private files
// within the limits (another's file answers exactly like a missing one), stores their ids
// on the message and carries them in the run task; a refused message stores nothing.
func TestMessageAttachments(t *testing.T) {
	t.Parallel()
	env := functionstest.New(t)
	alice, ajwt := env.SignUp(t, "att-alice@example.com", "password-alice")
	bob, bjwt := env.SignUp(t, "att-bob@example.com", "password-bob")
	conv := env.Conversation(t, ajwt)
	dir := t.TempDir()
	upload := func(jwt, owner, id, name, content string, extra ...string) {
		t.Helper()
		p := filepath.Join(dir, id+"-"+name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		st := storage.New(appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL), appwrite.WithProject(env.TS.Project), appwrite.WithJWT(jwt)))
		perms := append([]string{permission.Read(role.User(owner, ""))}, extra...)
		_, err := st.CreateFile(schema.BucketUploads, id, file.NewInputFile(p, name), st.WithCreateFilePermissions(perms))
		require.NoError(t, err)
	}
	upload(ajwt, alice, "a-notes", "notes.txt", "the tide turns at 14:07")
	upload(ajwt, alice, "a-data", "data.csv", "a,b\n1,2\n")
	upload(ajwt, alice, "a-shared", "shared.md", "# shared", permission.Read(role.Users("")))
	upload(bjwt, bob, "b-secret", "secret.txt", "bob's")

	send := func(req string, ids ...string) functionstest.Response {
		return env.Do(t, "POST", "/api/conversations/"+conv+"/messages", ajwt,
			map[string]any{"requestId": req, "text": "read these", "attachments": ids})
	}
	for _, c := range []struct {
		ids  []string
		code string
		st   int
	}{
		{[]string{"b-secret"}, "attachment_not_found", 404},
		{[]string{"no-such-file"}, "attachment_not_found", 404},
		{[]string{"a-shared"}, "attachment_not_private", 400},
		{[]string{"a-notes", "a-notes"}, "duplicate_attachment", 400},
		{[]string{"a", "b", "c", "d", "e", "f"}, "too_many_attachments", 400},
		{[]string{"../etc/passwd"}, "invalid_attachment", 400},
	} {
		res := send("refused-"+c.code, c.ids...)
		require.Equal(t, c.st, res.Status, string(res.Body))
		require.Equal(t, c.code, res.ErrorCode(), string(res.Body))
	}
	// Bob's file and a missing one answer byte for byte alike (but for the id named).
	foreign, missing := send("f1", "b-secret"), send("f2", "no-such-file")
	require.JSONEq(t, string(foreignAs(t, missing.Body, "no-such-file", "no-such-file")), string(foreignAs(t, foreign.Body, "b-secret", "no-such-file")))
	require.Equal(t, missing.Status, foreign.Status)

	res := send("with-files", "a-notes", "a-data")
	require.Equal(t, 202, res.Status, string(res.Body))
	var a admitted
	res.JSON(t, &a)
	msgs := env.Do(t, "GET", "/api/conversations/"+conv+"/messages", ajwt, nil)
	require.Equal(t, 200, msgs.Status)
	var page struct {
		Messages []struct {
			ID          string   `json:"id"`
			Attachments []string `json:"attachments"`
		} `json:"messages"`
	}
	msgs.JSON(t, &page)
	require.Len(t, page.Messages, 1, "the refused messages stored nothing")
	require.Equal(t, a.MessageID, page.Messages[0].ID)
	require.Equal(t, []string{"a-notes", "a-data"}, page.Messages[0].Attachments)

	insp := asynq.NewInspectorFromRedisClient(env.Redis.Client())
	ti, err := insp.GetTaskInfo("gpu:arc", a.RunID)
	require.NoError(t, err)
	var p queue.RunTask
	require.NoError(t, json.Unmarshal(ti.Payload, &p))
	require.Equal(t, []string{"a-notes", "a-data"}, p.Attachments)

	// The same request again is the same message; with other files it is a reuse.
	again := send("with-files", "a-notes", "a-data")
	require.Equal(t, 202, again.Status, string(again.Body))
	other := send("with-files", "a-notes")
	require.Equal(t, 409, other.Status, string(other.Body))
	require.Equal(t, "request_id_reused", other.ErrorCode())
}

func foreignAs(t *testing.T, body []byte, from, to string) []byte {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(body, &m))
	e := m["error"].(map[string]any)
	e["message"] = "attached file " + to + " not found"
	delete(e, "requestId") // the log's request id differs per call
	b, err := json.Marshal(m)
	require.NoError(t, err)
	require.Contains(t, string(body), from)
	return b
}
