package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/appwrite/sdk-for-go/client"
	"github.com/stretchr/testify/require"

	"privateassistant/backup"
	"privateassistant/modeltest"
	"privateassistant/schema"
)

// drillUser is the restored project's person. Accounts are not in an archive: the
// restore drill makes the account again on the new Appwrite with the same id.
type drillUser struct{ id, email, password string }

// devClient is a server client of a dev stack's emulator (the runtime key of its data dir).
func devClient(t *testing.T, s *Stack) client.Client {
	t.Helper()
	k, err := loadKeys(s.cfg.DataDir)
	require.NoError(t, err)
	return appwrite.NewClient(appwrite.WithEndpoint(s.URL+"/v1"), appwrite.WithProject("privateassistant"), appwrite.WithKey(k.Runtime))
}

// account makes the user's account with its id and the member label, as an admin would.
func (u drillUser) account(t *testing.T, s *Stack) {
	t.Helper()
	users := appwrite.NewUsers(devClient(t, s))
	_, err := users.Create(u.id, users.WithCreateEmail(u.email), users.WithCreatePassword(u.password), users.WithCreateName("Ada"))
	require.NoError(t, err)
	_, err = users.UpdateLabels(u.id, []string{"member"})
	require.NoError(t, err)
}

// drillPage is what testdata/restore-drill.mjs saw in the browser.
type drillPage struct {
	Titles   []string
	History  []string
	Cards    []string
	LastCard string
	File     struct {
		Name   string
		Size   int
		SHA256 string
	}
	Errors []string
}

// browse runs one phase of the browser half; expect is what the page should come to show
// (verify waits up to 10 s for it, then reports what it shows).
func browse(t *testing.T, root, base, phase string, u drillUser, expect *drillPage) drillPage {
	t.Helper()
	cmd := exec.Command("node", filepath.Join(root, "scripts", "dev", "testdata", "restore-drill.mjs"), phase)
	cmd.Dir = filepath.Join(root, "web")
	pw := url.URL{Scheme: "file", Path: filepath.Join(root, "web", "node_modules", "playwright-core", "index.mjs")}
	cmd.Env = append(os.Environ(), "PA_BASE_URL="+base, "PA_CHROMIUM="+chromium(), "PA_PLAYWRIGHT="+pw.String(),
		"PA_EMAIL="+u.email, "PA_PASSWORD="+u.password)
	if expect != nil {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false) // as JSON.stringify writes it
		require.NoError(t, enc.Encode(struct {
			History []string `json:"history"`
			Cards   []string `json:"cards"`
		}{expect.History, expect.Cards}))
		cmd.Env = append(cmd.Env, "PA_EXPECT="+strings.TrimSpace(want.String()))
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "node %s:\n%s%s", phase, out, stderr.String())
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	var p drillPage
	require.NoError(t, json.Unmarshal(lines[len(lines)-1], &p), "%s", out)
	t.Logf("%s: %+v\n%s", phase, p, stderr.String())
	return p
}

// TestRestoreDrillInTheBrowser is the browser end of the restore drill (issue 18, item 3;
// deploy/RUNBOOK.md "Check after"): a person holds a conversation in the web chat of one
// dev stack (two chat turns and a research run that saves a file); the project is backed
// up with the code of `pa admin backup`; a second, fresh stack restores the archive with
// the code of `pa admin restore` before its agent starts (Config.Restore); the person's
// account is made again with the same id; then, in Chromium, they sign in to the
// restored project, read the same history and download the file with the same SHA-256.
func TestRestoreDrillInTheBrowser(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	for _, need := range []string{filepath.Join(root, "web", "node_modules", "playwright-core"), chromium()} {
		_, err := os.Stat(need)
		require.NoError(t, err, "missing %s: run `make deps` (npm packages, Debian chromium)", need)
	}
	// Runs last: the SDK clients' keep-alive connections (http.DefaultTransport) to the
	// stacks' origins, which are gone by then (goleak checks after the package's tests).
	defer http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	start := time.Now()
	lap := func(what string) { t.Logf("%6.1f s  %s", time.Since(start).Seconds(), what) }
	ctx := context.Background()
	u := drillUser{id: "drill-ada", email: "ada@example.com", password: "password-" + hex.EncodeToString(randBytes(6))}

	// The source project, populated through the web chat.
	src, err := Start(ctx, Config{Root: root, DataDir: t.TempDir(), TokenDelay: 2 * time.Millisecond, Grace: 200 * time.Millisecond})
	require.NoError(t, err)
	defer src.Close()
	content := base64.StdEncoding.EncodeToString(randBytes(192 << 10)) // 256 KiB (one tool argument longer than the gateway's 64 KiB read buffer), new each run
	args, err := json.Marshal(map[string]string{"path": "drill.txt", "content": content})
	require.NoError(t, err)
	src.Model.SetScript("#drill", modeltest.Script{Turns: []modeltest.Turn{
		{Tokens: tokens("Writing the drill file."), ToolCalls: []modeltest.ToolCall{{Name: "write_file", Arguments: string(args)}}},
		{Tokens: tokens("I saved drill.txt for you.")},
	}})
	// The fourth run is still running when the backup is taken (a minute of tokens).
	src.Model.SetScript("#slow", modeltest.Script{Turns: []modeltest.Turn{{Tokens: tokens(strings.Repeat(" slow", 600)), TokenDelay: 100 * time.Millisecond}}})
	u.account(t, src)
	lap("source stack up")
	before := browse(t, root, src.URL, "populate", u, nil)
	lap("conversation held in the browser")
	sum := sha256.Sum256([]byte(content))
	require.Equal(t, hex.EncodeToString(sum[:]), before.File.SHA256, "the file as the source project serves it")

	// Backed up with the code of `pa admin backup`; the source is then gone.
	archive := filepath.Join(t.TempDir(), "pa-backup.tar")
	res, err := backup.Backup(ctx, backup.Options{Client: devClient(t, src), Model: schema.Definition(""), KeyRef: "env:APPWRITE_API_KEY",
		AppVersion: "drill", Progress: io.Discard}, archive)
	require.NoError(t, err)
	require.Equal(t, 1, res.Manifest.Counts.Documents[schema.CollConversations])
	require.Equal(t, 4, res.Manifest.Counts.Documents[schema.CollRuns])
	require.Equal(t, 1, res.Manifest.Counts.Documents[schema.CollArtifacts])
	lap("backed up")
	src.Close()

	// A fresh stack restores it before its agent starts; the account is made again.
	dst, err := Start(ctx, Config{Root: root, DataDir: t.TempDir(), Restore: archive})
	require.NoError(t, err)
	defer dst.Close()
	u.account(t, dst)
	lap("fresh stack up, archive restored")
	after := browse(t, root, dst.URL, "verify", u, &before)
	lap("history read and file downloaded in the browser")

	require.Equal(t, before.Titles, after.Titles, "the conversation list")
	require.GreaterOrEqual(t, len(after.History), len(before.History))
	require.Equal(t, before.History, after.History[:len(before.History)], "the history, turn by turn")
	history := strings.Join(after.History, "\n")
	for _, want := range []string{"user: first turn alpha", "assistant: You said: first turn alpha", "user: second turn bravo",
		"assistant: You said: second turn bravo", "user: save the #drill file", "I saved drill.txt for you."} {
		require.Contains(t, history, want)
	}
	require.Equal(t, append(before.Cards, "status interrupted"), after.Cards, "the runs' states; the one running at the backup is interrupted")
	require.Contains(t, after.LastCard, "Interrupted by a restore from backup: it was running when the backup was taken", "its card gives the reason")
	require.Equal(t, "drill.txt", after.File.Name)
	require.Equal(t, len(content), after.File.Size)
	require.Equal(t, hex.EncodeToString(sum[:]), after.File.SHA256, "the downloaded file, byte for byte")
	require.Empty(t, after.Errors, "no page errors")
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}
