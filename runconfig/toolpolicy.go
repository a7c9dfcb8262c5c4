package runconfig

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Toolsets names the tools each Hermes toolset holds (Hermes Agent 0.22.2, toolsets.py
// TOOLSETS, the entries a policy is likely to name). A policy entry is a toolset name or a
// single tool name; a toolset allows every tool it holds. A name that is neither is
// allowed only as itself.
var Toolsets = map[string][]string{
	"terminal":       {"terminal", "process_manage"},
	"file":           {"read_file", "write_file", "patch", "search_files"},
	"web":            {"web_search", "web_extract"},
	"search":         {"web_search"},
	"browser":        {"browser_navigate", "browser_snapshot", "browser_click", "browser_type", "browser_scroll", "browser_back", "browser_press", "browser_get_images", "browser_vision", "browser_console", "browser_cdp", "browser_dialog", "browser_vault", "browser_exec"},
	"vision":         {"vision_analyze"},
	"image_gen":      {"image_generate"},
	"skills":         {"skills_list", "skill_view", "skill_manage"},
	"cronjob":        {"cronjob_manage"},
	"tts":            {"text_to_speech"},
	"todo":           {"todo_list"},
	"memory":         {"memory"},
	"session_search": {"session_search"},
	"clarify":        {"clarify"},
	"code_execution": {"execute_code"},
	"delegation":     {"delegate_task"},
	"computer_use":   {"computer_use"},
	// The agent's MCP job server (agent/mcpjobs), loaded by the profile as mcp_servers.pa:
	// Hermes registers its tools as the toolset "mcp-pa" (alias "pa") under the names
	// mcp__pa__<tool>. A profile that offers it must turn Hermes's tools.tool_search off
	// (harness validation, agent/validator): with tool_search on, Hermes hides MCP tools
	// behind its tool_call dispatcher, which no policy allows and whose calls the gateway
	// cannot match to their caller.
	"pa":     JobTools,
	"mcp-pa": JobTools,
}

// JobTools are the MCP job server's tools as the model names them (app_tool: a host
// app's tools, for the runs that app started; apptools).
var JobTools = []string{"mcp__pa__enqueue_job", "mcp__pa__job_status", "mcp__pa__list_jobs", "mcp__pa__app_tool"}

// ToolPolicy is a run's effective tool policy (the admin ceiling ∩ the role's narrowing,
// pinned in the run's bindings): toolset or tool names. The zero value allows nothing.
type ToolPolicy []string

// ParseToolPolicy reads the bindings' toolPolicy (a JSON list). A missing or unreadable
// policy allows nothing: enforcement fails closed.
func ParseToolPolicy(s *string) (ToolPolicy, error) {
	if s == nil || strings.TrimSpace(*s) == "" {
		return ToolPolicy{}, nil
	}
	var p []string
	if err := json.Unmarshal([]byte(*s), &p); err != nil {
		return ToolPolicy{}, fmt.Errorf("tool policy %q: %w", *s, err)
	}
	return ToolPolicy(p), nil
}

// Dispatchers are tools that call other tools by a name in their arguments (Hermes's
// deferred-tool dispatcher): the gateway cannot see which tool they would run, so no
// policy allows them. (execute_code, the code_execution toolset, also reaches other tools
// inside Hermes: allow it only on a profile whose toolsets the policy covers, which
// harness validation checks.)
var Dispatchers = []string{"tool_call"}

// Allows reports whether the policy lets a run use the tool named tool (a function name
// in a chat-completion request or answer).
func (p ToolPolicy) Allows(tool string) bool {
	if tool == "" || slices.Contains(Dispatchers, tool) {
		return false
	}
	for _, e := range p {
		if e == tool || slices.Contains(Toolsets[e], tool) {
			return true
		}
	}
	return false
}

// GuardedTools are the tools Hermes 0.22.2 guards with an approval (tools/approval.py:
// a dangerous terminal command, code execution, and the file tools' write gates).
var GuardedTools = []string{"terminal", "execute_code", "write_file", "patch"}

// NeedsApprovals reports whether the policy allows a guarded tool: a run under it may
// need the user's approval, so its harness must ask for one.
func (p ToolPolicy) NeedsApprovals() bool {
	return slices.ContainsFunc(GuardedTools, p.Allows)
}

// Covers reports whether every tool of toolset is allowed (a toolset the policy does not
// know is covered only when the policy names it).
func (p ToolPolicy) Covers(toolset string) bool {
	if slices.Contains(p, toolset) {
		return true
	}
	tools, ok := Toolsets[toolset]
	if !ok {
		return false
	}
	for _, t := range tools {
		if !p.Allows(t) {
			return false
		}
	}
	return true
}

// Outside returns the tools (sorted, deduplicated) that the policy does not allow.
func (p ToolPolicy) Outside(tools []string) []string {
	var out []string
	for _, t := range tools {
		if !p.Allows(t) && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	sort.Strings(out)
	return out
}

// Uncovered returns the toolsets a harness offers (name → the tools it expands to, as the
// harness reports them) that the policy does not cover, sorted. A toolset is covered when
// the policy names it or allows every tool it holds.
func (p ToolPolicy) Uncovered(toolsets map[string][]string) []string {
	var out []string
	for name, tools := range toolsets {
		if slices.Contains(p, name) {
			continue
		}
		for _, t := range tools {
			if !p.Allows(t) {
				out = append(out, name)
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

// ProfileToolsets reads the toolsets a Hermes profile offers from its validated
// capabilities summary ("toolsets": name → tools); ok is false when they are unknown (not
// validated yet, or a Hermes without GET /v1/toolsets).
func ProfileToolsets(capabilities *string) (toolsets map[string][]string, ok bool) {
	if capabilities == nil || *capabilities == "" {
		return nil, false
	}
	var c struct {
		Toolsets map[string][]string `json:"toolsets"`
	}
	if json.Unmarshal([]byte(*capabilities), &c) != nil || c.Toolsets == nil {
		return nil, false
	}
	return c.Toolsets, true
}
