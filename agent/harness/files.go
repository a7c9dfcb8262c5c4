package harness

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"

	"privateassistant/hermes"
)

// FileCollector is a harness whose runs' file tools write into a work folder of the
// harness's (real Hermes: each run's own folder under terminal.cwd; its API has no
// per-run working directory). RunFiles reports what the run's own file tools wrote and
// which of their writes failed.
type FileCollector interface {
	RunFiles(ctx context.Context, sessionID, input string) (RunFiles, error)
}

// RunFiles is what a run's file tools did. Written are the paths they wrote, as the
// harness named them (absolute in the harness's view, or relative to the run's folder);
// the caller resolves them inside the run's folder and refuses anything outside it.
// Failed are the writes the harness refused or that failed (e.g. Hermes's "Refusing to
// overwrite"): a run that completes despite them must say so.
type RunFiles struct {
	Written []string
	Failed  []FailedWrite
}

// FailedWrite is a write_file or patch call whose result was an error.
type FailedWrite struct {
	Tool, Path, Error string
}

var _ FileCollector = (*Hermes)(nil)

// ErrTurnNotFound: the session's transcript has no user row with the run's input.
var ErrTurnNotFound = errors.New("harness: the run's turn is not in the session")

// fileTools are the tools that write files, with the argument naming the file.
var fileTools = map[string]bool{"write_file": true, "patch": true}

// v4aHeader matches the files a V4A patch adds, updates or moves to (Hermes's
// _V4A_SINGLE_HEADER_RE / _V4A_MOVE_HEADER_RE; deletions write nothing).
var v4aHeader = regexp.MustCompile(`(?m)^\*\*\*\s*(?:(?:Update|Add)\s+File:\s*(.+)|Move\s+File:\s*.+?\s*->\s*(.+))$`)

// RunFiles reads the session's transcript and returns the files the run's write_file and
// patch calls wrote: the rows after the newest user row whose text is the run's input
// (turns of a session are serialized, so they are this run's), up to the next user row.
// Only calls whose tool row reports success count as written (a refused or never-executed
// call wrote nothing, and the file at that path may be another run's); the tool row's
// files_modified (absolute, as Hermes resolved them) names the files, else the call's
// arguments do. Calls whose tool row reports an error are Failed, with its text.
func (h *Hermes) RunFiles(ctx context.Context, sessionID, input string) (RunFiles, error) {
	msgs, err := h.Client.AllSessionMessages(ctx, sessionID)
	if err != nil {
		return RunFiles{}, mapErr(err)
	}
	return runFiles(msgs, input)
}

func runFiles(msgs []hermes.SessionMessage, input string) (RunFiles, error) {
	start := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" && msgs[i].Content == input {
			start = i
			break
		}
	}
	if start < 0 || input == "" {
		return RunFiles{}, ErrTurnNotFound
	}
	calls := map[string]hermes.ToolCall{}
	var out []string
	var failed []FailedWrite
	seen := map[string]bool{}
	add := func(p string) {
		if p = strings.TrimSpace(p); p != "" && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, m := range msgs[start+1:] {
		if m.Role == "user" {
			break
		}
		if m.Role == "assistant" {
			for _, c := range m.ToolCalls {
				if fileTools[c.Function.Name] && c.ID != "" {
					calls[c.ID] = c
				}
			}
			continue
		}
		c, ok := calls[m.ToolCallID]
		if m.Role != "tool" || !ok {
			continue
		}
		delete(calls, m.ToolCallID) // one result per call
		var res struct {
			Error         any      `json:"error"`
			Success       *bool    `json:"success"`
			FilesModified []string `json:"files_modified"`
		}
		if json.Unmarshal([]byte(m.Content), &res) != nil {
			continue
		}
		if isSet(res.Error) || (res.Success != nil && !*res.Success) {
			why, _ := res.Error.(string)
			if strings.TrimSpace(why) == "" {
				why = "the tool reported a failure"
			}
			failed = append(failed, FailedWrite{Tool: c.Function.Name, Path: strings.Join(argPaths(c), ", "), Error: why})
			continue
		}
		if len(res.FilesModified) > 0 {
			for _, p := range res.FilesModified {
				add(p)
			}
			continue
		}
		for _, p := range argPaths(c) {
			add(p)
		}
	}
	return RunFiles{Written: out, Failed: failed}, nil
}

func isSet(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case string:
		return x != ""
	case bool:
		return x
	}
	return true
}

// argPaths are the files a write_file or patch call names in its arguments.
func argPaths(c hermes.ToolCall) []string {
	var a struct {
		Path  string `json:"path"`
		Mode  string `json:"mode"`
		Patch string `json:"patch"`
	}
	if json.Unmarshal(c.Args(), &a) != nil {
		return nil
	}
	var out []string
	if a.Path != "" {
		out = append(out, a.Path)
	}
	if c.Function.Name == "patch" && a.Mode == "patch" {
		for _, m := range v4aHeader.FindAllStringSubmatch(a.Patch, -1) {
			out = append(out, m[1]+m[2])
		}
	}
	return out
}
