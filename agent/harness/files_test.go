package harness_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/harness"
	"privateassistant/hermes"
)

// transcript serves GET /api/sessions/{id}/messages with rows shaped as real Hermes
// 0.22.2.post1 returns them (captured from a real run).
func transcript(t *testing.T, rows []map[string]any) *harness.Hermes {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "/api/sessions/s1/messages", r.URL.Path)
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "session_id": "s1", "data": rows})
	}))
	t.Cleanup(srv.Close)
	return &harness.Hermes{Client: &hermes.Client{BaseURL: srv.URL, HTTP: srv.Client()}}
}

func call(id, name string, args map[string]any) map[string]any {
	b, _ := json.Marshal(args)
	return map[string]any{"id": id, "call_id": id, "type": "function", "function": map[string]any{"name": name, "arguments": string(b)}}
}

func toolRow(id, name string, result map[string]any) map[string]any {
	b, _ := json.Marshal(result)
	return map[string]any{"role": "tool", "tool_call_id": id, "tool_name": name, "content": string(b)}
}

// RunFiles returns the files the run's own write_file and patch calls wrote: only the
// rows of its turn (after its user row, before the next), only calls whose tool row
// reports success, named by files_modified or, without it, by the call's arguments
// (a V4A patch's Add/Update/Move headers); the calls whose row reports an error are
// Failed, with its text.
func TestRunFilesAreTheRunsOwnSuccessfulWrites(t *testing.T) {
	t.Parallel()
	const w = "/tmp/work/"
	h := transcript(t, []map[string]any{
		{"role": "user", "content": "earlier turn"},
		{"role": "assistant", "content": "", "tool_calls": []any{call("c0", "write_file", map[string]any{"path": "earlier.md", "content": "x"})}},
		toolRow("c0", "write_file", map[string]any{"bytes_written": 1, "files_modified": []string{w + "earlier.md"}}),
		{"role": "assistant", "content": "done"},
		{"role": "user", "content": "write #mine"},
		{"role": "assistant", "content": "", "tool_calls": []any{
			call("c1", "write_file", map[string]any{"path": "a.md", "content": "A"}),
			call("c2", "patch", map[string]any{"mode": "patch", "patch": "*** Begin Patch\n*** Add File: sub/b.md\n+B\n*** Move File: old.md -> moved.md\n*** Delete File: gone.md\n*** End Patch\n"}),
			call("c3", "write_file", map[string]any{"path": "/etc/hostname", "content": "x"}),
			call("c4", "read_file", map[string]any{"path": "read.md"}),
			call("c5", "write_file", map[string]any{"path": "never-ran.md", "content": "x"}),
			call("c6", "patch", map[string]any{"path": "c.md", "old_string": "a", "new_string": "b"}),
		}},
		toolRow("c1", "write_file", map[string]any{"bytes_written": 1, "resolved_path": w + "a.md", "files_modified": []string{w + "a.md"}}),
		toolRow("c2", "patch", map[string]any{"success": true}),
		toolRow("c3", "write_file", map[string]any{"error": "Refusing to write to sensitive system path"}),
		toolRow("c4", "read_file", map[string]any{"content": "x"}),
		toolRow("c6", "patch", map[string]any{"success": false, "error": "Could not find"}),
		{"role": "assistant", "content": "Wrote them."},
		{"role": "user", "content": "a later turn"},
		{"role": "assistant", "content": "", "tool_calls": []any{call("c7", "write_file", map[string]any{"path": "later.md", "content": "x"})}},
		toolRow("c7", "write_file", map[string]any{"files_modified": []string{w + "later.md"}}),
	})
	ctx := context.Background()
	got, err := h.RunFiles(ctx, "s1", "write #mine")
	require.NoError(t, err)
	require.Equal(t, []string{w + "a.md", "sub/b.md", "moved.md"}, got.Written)
	require.Equal(t, []harness.FailedWrite{
		{Tool: "write_file", Path: "/etc/hostname", Error: "Refusing to write to sensitive system path"},
		{Tool: "patch", Path: "c.md", Error: "Could not find"},
	}, got.Failed, "the refused writes are reported, never counted as written")

	got, err = h.RunFiles(ctx, "s1", "earlier turn")
	require.NoError(t, err)
	require.Equal(t, []string{w + "earlier.md"}, got.Written)
	require.Empty(t, got.Failed)

	_, err = h.RunFiles(ctx, "s1", "not in this session")
	require.ErrorIs(t, err, harness.ErrTurnNotFound, "no turn, no files: never another run's")
}
