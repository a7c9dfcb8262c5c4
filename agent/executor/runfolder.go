package executor

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"privateassistant/agent/artifacts"
	"privateassistant/agent/harness"
)

// RunsDir is the folder, inside a harness's work folder, that holds every run's own
// folder: <work folder>/runs/<run id>/, with the run's attached files in its inputs/
// (issue 30). The run is told its folder (runNote); its artifacts are the files its own
// file tools wrote inside it (finish.go), never a file of another run's.
const RunsDir = "runs"

// sessionsDir (in RunsDir) maps a native session to the run it is running:
// runs/.sessions/<session id> holds the run id. A member's Hermes reads it before the
// run's first model call and makes the run's folder that session's working directory
// (agent/homes RunFolderPlugin): Hermes's API carries no per-run working directory.
const sessionsDir = ".sessions"

// folderID is an id that can name a file (run ids and session ids the executor makes).
var folderID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,255}$`)

// harnessCwd is the work folder as the harness names it.
func (a *attempt) harnessCwd() string {
	if a.cwd == "" {
		return a.workDir
	}
	return a.cwd
}

// runFolder returns the run's own folder as this host sees it and as its harness names
// it ("" without a work folder).
func (a *attempt) runFolder() (host, shown string) {
	if a.workDir == "" || !folderID.MatchString(a.runID) {
		return "", ""
	}
	return filepath.Join(a.workDir, RunsDir, a.runID), filepath.Join(a.harnessCwd(), RunsDir, a.runID)
}

// splitRunFiles splits the paths the run's file tools wrote into those its artifacts are
// taken from in its own folder and, on a Hermes shared by every run (HermesWorkDir: its
// operator's, which need not run the run-folder plugin, so a relative path lands in its
// terminal.cwd), the rest, taken from the work folder as before run folders. A member's
// own Hermes runs the plugin: there every path counts against the run's folder only, and
// one outside it is refused (artifacts.Resolve).
func (a *attempt) splitRunFiles(names []string) (inRun, rest []string) {
	if a.ownFolder {
		return names, nil
	}
	_, shown := a.runFolder()
	real := ""
	if r, err := filepath.EvalSymlinks(filepath.Join(a.workDir, RunsDir, a.runID)); err == nil && filepath.Clean(a.harnessCwd()) == filepath.Clean(a.workDir) {
		real = r
	}
	for _, n := range names {
		n = strings.TrimSpace(n)
		in := false
		if filepath.IsAbs(n) {
			_, why := artifacts.Resolve(shown, n)
			in = why == ""
			if !in && real != "" {
				_, why = artifacts.Resolve(real, n)
				in = why == ""
			}
		}
		if in {
			inRun = append(inRun, n)
		} else {
			rest = append(rest, n)
		}
	}
	return inRun, rest
}

// prepareRunFolder makes the run's folder and points the native session at it (written
// before every submission: a session continued by a later turn then works in that turn's
// folder). A run folder that cannot be made fails the run; a session that cannot be pointed
// at it is logged, and the run goes on (told its folder by its full path).
func (a *attempt) prepareRunFolder(session string) error {
	host, _ := a.runFolder()
	if host == "" {
		return nil
	}
	r, err := a.openDir(host)
	if err != nil {
		return fmt.Errorf("the run's folder: %w", err)
	}
	r.Close()
	if !folderID.MatchString(session) {
		return nil
	}
	root, err := a.openDir(filepath.Join(a.workDir, RunsDir, sessionsDir))
	if err != nil {
		// (A member's tools broke it.) The run goes on, told its folder by its full path.
		a.e.log().Warn("the run's session could not be pointed at its folder", "run", a.runID, "err", err)
		return nil
	}
	defer root.Close()
	tmp := session + "." + a.runID + ".part"
	if err := root.WriteFile(tmp, []byte(a.runID+"\n"), 0o640); err != nil {
		return fmt.Errorf("the run's folder: %w", err)
	}
	if err := root.Rename(tmp, session); err != nil {
		return fmt.Errorf("the run's folder: %w", err)
	}
	return nil
}

// openDir makes dir and opens it as an os.Root. A folder in the work folder is reached
// from the work folder's parent (a member's home, which their tools cannot replace, only
// its contents): a work folder, runs folder or run folder that a run's tools swapped for
// a link leading out of the home is never entered, so nothing is placed, read or uploaded
// through it on this host. Another folder (the artifact root's inputs) is the agent's own.
func (a *attempt) openDir(dir string) (*os.Root, error) {
	base := filepath.Dir(a.workDir)
	rel, err := filepath.Rel(base, dir)
	if a.workDir == "" || err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, err
		}
		return os.OpenRoot(dir)
	}
	r, err := os.OpenRoot(base)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if err := r.MkdirAll(rel, 0o750); err != nil {
		return nil, err
	}
	return r.OpenRoot(rel)
}

// removeRunFolder deletes the run's folder (its inputs and the files it wrote), reached
// from the member's home like every other use of it (openDir).
func (a *attempt) removeRunFolder() {
	host, _ := a.runFolder()
	if host == "" {
		return
	}
	base := filepath.Dir(a.workDir)
	rel, err := filepath.Rel(base, host)
	if err != nil {
		return
	}
	r, err := os.OpenRoot(base)
	if err != nil {
		a.e.log().Warn("the run's folder could not be removed", "run", a.runID, "err", err)
		return
	}
	defer r.Close()
	if err := r.RemoveAll(rel); err != nil {
		a.e.log().Warn("the run's folder could not be removed", "run", a.runID, "err", err)
	}
}

// runNote is what the run's instructions say about its folder: that it is the run's
// working directory only where the harness makes it so (a member's Hermes).
func (a *attempt) runNote() string {
	_, shown := a.runFolder()
	if shown == "" || a.h == nil || a.h.Kind() == harness.DirectKind {
		return ""
	}
	inputs := filepath.Join(shown, InputsDir)
	if a.ownFolder {
		return fmt.Sprintf("Your folder for this run is %s: your terminal starts there and relative paths are taken from it. "+
			"Save every file you make in it; only files saved there are returned to the user. "+
			"Files attached to the user's message, if any, are in %s.", shown, inputs)
	}
	return fmt.Sprintf("Your folder for this run is %s. Save every file you make in it, by its full path inside it; "+
		"files saved there are returned to the user. Files attached to the user's message, if any, are in %s.", shown, inputs)
}
