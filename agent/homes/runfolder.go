package homes

import (
	"embed"
	"os"
	"path/filepath"
	"slices"
)

// RunFolderPlugin is the Hermes plugin every member's home runs (runfolder/): before a
// run's first model call it makes the run's own folder, <terminal.cwd>/runs/<run id>, the
// working directory of the run's session (Hermes's register_task_env_overrides, what its
// ACP and TUI use for a session's workspace), reading the run id the agent wrote to
// <terminal.cwd>/runs/.sessions/<session id> (agent/executor runfolder.go). Hermes's API
// server has no per-run working directory of its own.
const RunFolderPlugin = "pa-runfolder"

//go:embed runfolder/plugin.yaml runfolder/__init__.py
var runFolderFiles embed.FS

// writePlugin (re)writes the run-folder plugin into the member's HERMES_HOME/plugins.
func writePlugin(hermesHome string) error {
	dir := filepath.Join(hermesHome, "plugins", RunFolderPlugin)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, name := range []string{"plugin.yaml", "__init__.py"} {
		b, err := runFolderFiles.ReadFile("runfolder/" + name)
		if err != nil {
			return err
		}
		if err := writeFile(filepath.Join(dir, name), b); err != nil {
			return err
		}
	}
	return nil
}

// enablePlugin adds the run-folder plugin to the config's plugins.enabled (kept beside
// the template's own).
func enablePlugin(cfg map[string]any) {
	p := child(cfg, "plugins")
	var on []any
	if l, ok := p["enabled"].([]any); ok {
		on = l
	}
	if !slices.Contains(on, any(RunFolderPlugin)) {
		on = append(on, RunFolderPlugin)
	}
	p["enabled"] = on
	if l, ok := p["disabled"].([]any); ok {
		p["disabled"] = slices.DeleteFunc(l, func(v any) bool { return v == RunFolderPlugin })
	}
}
