package runconfig_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/runconfig"
	"privateassistant/schema"
)

func TestToolPolicy(t *testing.T) {
	p := runconfig.ToolPolicy{"file", "web_search"}
	for _, tool := range []string{"read_file", "write_file", "patch", "search_files", "web_search"} {
		require.True(t, p.Allows(tool), tool)
	}
	for _, tool := range []string{"terminal", "process_manage", "web_extract", "file", "", "memory"} {
		if tool == "file" {
			continue // a toolset name is not a tool
		}
		require.False(t, p.Allows(tool), tool)
	}
	require.True(t, p.Covers("file"))
	require.False(t, p.Covers("web"), "web_extract is not allowed")
	require.True(t, p.Covers("search"), "every tool of search (web_search) is allowed")
	require.False(t, p.Covers("terminal"))
	require.False(t, p.Covers("unknown-toolset"))
	require.True(t, runconfig.ToolPolicy{"unknown-toolset"}.Covers("unknown-toolset"))
	require.Equal(t, []string{"memory", "terminal"}, p.Outside([]string{"terminal", "read_file", "memory", "terminal"}))

	require.False(t, runconfig.ToolPolicy{"tool_call"}.Allows("tool_call"), "a dispatcher is never allowed, even when named")

	var zero runconfig.ToolPolicy
	require.False(t, zero.Allows("read_file"), "the zero policy allows nothing")

	got, err := runconfig.ParseToolPolicy(schema.Ptr(`["terminal"]`))
	require.NoError(t, err)
	require.True(t, got.Allows("process_manage"))
	for _, s := range []*string{nil, schema.Ptr(""), schema.Ptr("[]")} {
		got, err = runconfig.ParseToolPolicy(s)
		require.NoError(t, err)
		require.False(t, got.Allows("terminal"), "no policy allows nothing")
	}
	_, err = runconfig.ParseToolPolicy(schema.Ptr(`{"not":"a list"}`))
	require.Error(t, err)

	offered := map[string][]string{"terminal": {"process_manage", "terminal"}, "file": {"patch", "read_file", "search_files", "write_file"}, "mcp-x": {"x_do"}}
	require.Equal(t, []string{"file", "mcp-x", "terminal"}, runconfig.ToolPolicy{}.Uncovered(offered))
	require.Equal(t, []string{"mcp-x", "terminal"}, runconfig.ToolPolicy{"file"}.Uncovered(offered))
	require.Equal(t, []string{"terminal"}, runconfig.ToolPolicy{"file", "mcp-x"}.Uncovered(offered), "a named toolset is covered")
	require.Empty(t, runconfig.ToolPolicy{"file", "terminal", "x_do"}.Uncovered(offered))

	ts, ok := runconfig.ProfileToolsets(schema.Ptr(`{"runs_idempotency":{},"toolsets":{"file":["read_file"]}}`))
	require.True(t, ok)
	require.Equal(t, map[string][]string{"file": {"read_file"}}, ts)
	for _, c := range []*string{nil, schema.Ptr(""), schema.Ptr(`{"runs_idempotency":{}}`), schema.Ptr(`{"toolsets":`)} {
		_, ok = runconfig.ProfileToolsets(c)
		require.False(t, ok)
	}
}

// The MCP job tools: a policy naming "pa" (or Hermes's toolset name "mcp-pa") allows the
// three tools the model calls and covers the toolset Hermes reports for the server.
func TestJobToolset(t *testing.T) {
	for _, name := range []string{"pa", "mcp-pa"} {
		p := runconfig.ToolPolicy{"file", name}
		for _, tool := range []string{"mcp__pa__enqueue_job", "mcp__pa__job_status", "mcp__pa__list_jobs", "mcp__pa__app_tool"} {
			require.True(t, p.Allows(tool), "%s: %s", name, tool)
		}
		require.False(t, p.Allows("mcp__other__enqueue_job"))
		require.True(t, p.Covers("pa"))
		require.True(t, p.Covers("mcp-pa"))
		require.Empty(t, p.Uncovered(map[string][]string{"mcp-pa": runconfig.JobTools}))
	}
	require.Equal(t, []string{"mcp-pa"}, runconfig.ToolPolicy{"file"}.Uncovered(map[string][]string{"mcp-pa": runconfig.JobTools}),
		"a policy without the job tools does not cover a profile offering them")
}
