package homes

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Inside is where a member's home is mounted in their sandbox: every member's Hermes sees
// its own home at the same path, so no path names the member.
const Inside = "/member"

// The folders of a member's home (inside and on the host, below the member's folder).
const (
	hermesDir = "hermes" // HERMES_HOME: config.yaml, .env, state.db, memories, skills, runs_idempotency.db
	homeDir   = "home"   // HOME
	workDir   = "work"   // terminal.cwd: the member's working folder (their inputs/ and artifacts)
	tmpDir    = "tmp"    // TMPDIR
)

// systemRO are the host paths every sandbox sees read-only (when they exist): the system's
// programs and libraries, and of /etc only what name resolution, TLS and the dynamic
// loader read. Nothing else of the host: not /etc as a whole (an agent's EnvironmentFile
// may live there), not /home, /root, /var, /run, /work or the agent's data.
var systemRO = []string{
	"/usr",
	"/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/host.conf", "/etc/gai.conf",
	"/etc/ssl", "/etc/ca-certificates", "/etc/pki", "/etc/localtime", "/etc/timezone",
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
	"/etc/mime.types", "/etc/login.defs", "/etc/bash.bashrc", "/etc/profile", "/etc/inputrc",
}

// usrLinks are the top-level folders a merged-/usr system links into /usr.
var usrLinks = []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// sandbox is one member's Hermes process as bwrap runs it.
type sandbox struct {
	Bwrap     string   // the bwrap binary
	MemberDir string   // the member's folder on the host (mounted read-write at Inside)
	ReadOnly  []string // more host folders seen read-only at the same path (the venv, its Python)
	Argv      []string // the command inside (absolute)
}

// args is bwrap's command line. The sandbox:
//   - has a mount namespace of its own whose root is an empty tmpfs: /usr (and the merged
//     /bin, /lib… links), a few /etc files, the Hermes venv and its Python read-only, and the
//     member's own folder read-write at /member; a private /tmp, a minimal /dev;
//   - has a PID namespace of its own, and /proc is that namespace's: a tool sees only its
//     own Hermes and its children, never another member's process or the agent;
//   - has its own IPC and UTS namespaces, a session of its own (no TIOCSTI into the
//     agent's terminal), no capabilities and no_new_privs (a setuid binary gains nothing);
//   - dies with the agent (--die-with-parent);
//   - gets these options through a pipe (spawn: --args), so its /proc/1/cmdline (bwrap is
//     the sandbox's PID 1) names no host path and no member.
//
// The network is shared with the host: Hermes must reach the agent's inference gateway
// and MCP job server and serve the agent on loopback (docs/design/member-homes.md says what that leaves).
func (s sandbox) args() []string {
	a := []string{s.Bwrap,
		// Hermes is the PID namespace's init (--as-pid-1): when it exits the kernel kills and
		// reaps everything else in the sandbox before bwrap's wait returns, so a stopped
		// member's Hermes is wholly gone when stop returns; and it receives the SIGTERM
		// stop sends it (by the pid --info-fd reports) for a graceful shutdown.
		"--unshare-pid", "--as-pid-1", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--info-fd", "4",
		"--die-with-parent", "--new-session", "--cap-drop", "ALL",
		"--tmpfs", "/",
		// The sandbox's own /proc, /dev and /tmp first: a bind below (a venv in /tmp) must
		// not be hidden by them.
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
	}
	for _, p := range usrLinks {
		if t, err := os.Readlink(p); err == nil {
			a = append(a, "--symlink", t, p)
		} else if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			a = append(a, "--ro-bind", p, p)
		}
	}
	for _, p := range systemRO {
		a = append(a, "--ro-bind-try", p, p)
	}
	for _, p := range s.ReadOnly {
		a = append(a, "--ro-bind", p, p)
	}
	a = append(a,
		"--bind", s.MemberDir, Inside,
		"--chdir", filepath.Join(Inside, workDir),
		"--")
	return append(a, s.Argv...)
}

// venvPaths are the folders a Hermes venv needs read-only: the venv itself (by its real
// path: its scripts' #! lines name it) and the Python installation it was made from
// (pyvenv.cfg's home).
func venvPaths(venv string) ([]string, error) {
	real, err := filepath.EvalSymlinks(venv)
	if err != nil {
		return nil, fmt.Errorf("hermes venv: %w", err)
	}
	out := []string{real}
	if real != venv && filepath.IsAbs(venv) {
		out = append(out, venv) // as the caller names it, too (a symlinked .cache)
	}
	f, err := os.Open(filepath.Join(real, "pyvenv.cfg"))
	if err != nil {
		return nil, fmt.Errorf("hermes venv: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok || strings.TrimSpace(k) != "home" {
			continue
		}
		bin, err := filepath.EvalSymlinks(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("hermes venv's python: %w", err)
		}
		if prefix := filepath.Dir(bin); !strings.HasPrefix(prefix, "/usr/") && prefix != "/usr" {
			out = append(out, prefix) // e.g. /root/.pyenv/versions/3.11.7; /usr is already there
		}
	}
	return out, sc.Err()
}
