package homes

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"privateassistant/agent/memberkey"
	"privateassistant/internal/startstop"
)

// Options configure a Supervisor.
type Options struct {
	// Root holds every member's home: <Root>/<member id>/{hermes,home,work,tmp}.
	Root string
	// Venv is the Hermes virtualenv (scripts/hermes/install.sh); its bin/hermes runs.
	Venv string
	// Template is the operator's Hermes profile config.yaml (PA_AGENT_HERMES_CONFIG): each
	// member's config.yaml is made from it (memberConfig), its .env from the .env beside it.
	Template string
	// Bwrap is the bubblewrap binary (default: bwrap on PATH). There is no unconfined mode.
	Bwrap string
	// IdleAfter stops a member's Hermes that no run has used for this long (default 10 min).
	IdleAfter time.Duration
	// StartTimeout bounds a start until /health answers (default 120 s).
	StartTimeout time.Duration
	// StopGrace is how long a stopping Hermes gets after SIGTERM (default 8 s).
	StopGrace time.Duration
	// MaxRunning bounds the members' Hermes processes running at once (default 8; each
	// holds about 150 MB idle): a start beyond it stops the least recently used idle one
	// first, or fails with ErrFull when all are in use.
	MaxRunning int
	// GatewayKey is the agent's gateway key (PA_GATEWAY_API_KEY). With it each member's
	// Hermes gets the member's own key instead (agent/memberkey, as GATEWAY_API_KEY in
	// their .env): the gateway and the MCP server serve it for that member's runs only, and
	// a template whose config.yaml holds the agent's key itself is refused.
	GatewayKey string
	// Check, when set, is run on each newly started Hermes (the daemon checks the
	// capabilities runs rely on, durable run idempotency): an error stops it again and
	// fails the Acquire.
	Check func(ctx context.Context, h Home) error
	Log   *slog.Logger
}

// Home is a member's running Hermes as a run uses it.
type Home struct {
	Member  string
	URL     string // http://127.0.0.1:<port>
	Key     string // its API_SERVER_KEY (generated at each start, never written to a file)
	WorkDir string // the member's working folder on this host
	Cwd     string // the same folder as their Hermes names it (/member/work)
}

// ErrStopped: the supervisor was stopped; it starts nothing.
var ErrStopped = errors.New("homes: stopped")

// ErrBadMember: an owner id that cannot name a folder (only Appwrite ids are accepted).
var ErrBadMember = errors.New("homes: invalid member id")

// memberRe is an Appwrite user id (also an app user's derived id): it names a folder.
var memberRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// Supervisor owns every member's Hermes process: started on a member's first run,
// stopped when idle, on Forget and on Stop. One goroutine of its own (the idle reaper)
// plus one per running process (waiting for it to exit); Stop waits for all of them.
type Supervisor struct {
	opts Options
	ro   []string // bwrap's read-only extras (the venv, its Python)
	bg   startstop.Runner

	mu      sync.Mutex // guards members, their active/lastUsed, stopped
	members map[string]*member
	stopped bool
	probeMu sync.Mutex // one Probe at a time; Stop waits for the one in progress
}

// member is one member's process slot. Its mu serializes starting, stopping and forgetting
// (slow: never held with Supervisor.mu waited for inside; order is member.mu, then
// Supervisor.mu).
type member struct {
	id       string
	mu       sync.Mutex
	proc     *process
	active   int       // runs holding the home (Supervisor.mu)
	lastUsed time.Time // (Supervisor.mu)
	running  bool      // proc is set (Supervisor.mu; written with proc, under mu)
	cur      *process  // proc, for Status (Supervisor.mu)
	failed   error     // the last start's failure, until a start succeeds (Supervisor.mu; status.go)
	stopped  time.Time // when reap stopped its Hermes (Supervisor.mu): it reads idle for IdleAfter more
}

// setProc sets the member's process (the caller holds m.mu) and its running mark.
func (s *Supervisor) setProc(m *member, p *process) {
	m.proc = p
	s.mu.Lock()
	m.running, m.cur = p != nil, p
	s.mu.Unlock()
}

// ErrFull: MaxRunning members' Hermes processes run and every one is in use; the run is
// tried again later.
var ErrFull = errors.New("homes: every member Hermes slot is in use")

// makeRoom stops the least recently used idle member's Hermes while MaxRunning run (self
// holds its own mu and is active, so it is never chosen; a victim's mu is taken after
// self's: a member being started is always active, so no two starts wait on each other).
func (s *Supervisor) makeRoom(self *member) error {
	for {
		s.mu.Lock()
		n := 0
		var victim *member
		for _, m := range s.members {
			if !m.running {
				continue
			}
			n++
			if m != self && m.active == 0 && (victim == nil || m.lastUsed.Before(victim.lastUsed)) {
				victim = m
			}
		}
		s.mu.Unlock()
		if n < s.opts.MaxRunning {
			return nil
		}
		if victim == nil {
			return ErrFull
		}
		victim.mu.Lock()
		s.mu.Lock()
		idle := victim.active == 0
		s.mu.Unlock()
		if idle && victim.proc != nil {
			s.opts.Log.Info("stopping the least recently used member's hermes to make room", "member", victim.id, "for", self.id)
			victim.proc.stop(s.opts.StopGrace)
			s.setProc(victim, nil)
		}
		victim.mu.Unlock()
	}
}

// New checks the options: the venv, the template and bwrap must exist.
func New(opts Options) (*Supervisor, error) {
	if opts.Root == "" || opts.Venv == "" || opts.Template == "" {
		return nil, errors.New("homes: Root, Venv and Template are required")
	}
	if opts.Bwrap == "" {
		opts.Bwrap = "bwrap"
	}
	bw, err := exec.LookPath(opts.Bwrap)
	if err != nil {
		return nil, fmt.Errorf("homes: bubblewrap is required to confine members' tools (apt-get install bubblewrap): %w", err)
	}
	opts.Bwrap = bw
	if opts.IdleAfter <= 0 {
		opts.IdleAfter = 10 * time.Minute
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 120 * time.Second
	}
	if opts.StopGrace <= 0 {
		opts.StopGrace = 8 * time.Second
	}
	if opts.MaxRunning <= 0 {
		opts.MaxRunning = 8
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if _, err := os.Stat(opts.Template); err != nil {
		return nil, fmt.Errorf("homes: hermes profile template: %w", err)
	}
	ro, err := venvPaths(opts.Venv)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Root, 0o700); err != nil {
		return nil, err
	}
	return &Supervisor{opts: opts, ro: ro, members: map[string]*member{}}, nil
}

// Start runs the idle reaper.
func (s *Supervisor) Start(ctx context.Context) error {
	every := s.opts.IdleAfter / 4
	return s.bg.Start(ctx, func(ctx context.Context) {
		startstop.Every(ctx, every, s.opts.Log, "idle hermes homes", func(context.Context) error { s.reap(time.Now()); return nil })
	})
}

// Stop stops the reaper and every member's Hermes, and waits for them.
func (s *Supervisor) Stop() {
	s.bg.Stop()
	s.mu.Lock()
	s.stopped = true
	all := make([]*member, 0, len(s.members))
	for _, m := range s.members {
		all = append(all, m)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range all {
		wg.Add(1)
		go func() { defer wg.Done(); s.stopMember(m) }()
	}
	wg.Wait()
	s.probeMu.Lock() // a Probe in progress has stopped its Hermes
	s.probeMu.Unlock()
}

// Dir is the member's folder on this host.
func (s *Supervisor) Dir(member string) (string, error) {
	if !memberRe.MatchString(member) {
		return "", ErrBadMember
	}
	return filepath.Join(s.opts.Root, member), nil
}

// Acquire returns the member's running Hermes, creating their home and starting it when
// needed; release (call it once, when the run is done with it) lets it idle-stop. The
// member is the run's verified owner (the run record's ownerId), never a name from a
// request or a model.
func (s *Supervisor) Acquire(ctx context.Context, id string) (Home, func(), error) {
	dir, err := s.Dir(id)
	if err != nil {
		return Home{}, nil, err
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return Home{}, nil, ErrStopped
	}
	m := s.members[id]
	if m == nil {
		m = &member{id: id}
		s.members[id] = m
	}
	m.active++
	s.mu.Unlock()
	var once sync.Once
	release := func() {
		once.Do(func() {
			s.mu.Lock()
			m.active--
			m.lastUsed = time.Now()
			s.mu.Unlock()
		})
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc == nil || m.proc.exited() {
		if m.proc != nil {
			s.opts.Log.Warn("a member's hermes had exited; starting it again", "member", id, "log", tail(m.proc.log.Name(), 5))
			m.proc.stop(0)
			s.setProc(m, nil)
		}
		s.mu.Lock()
		stopped := s.stopped
		s.mu.Unlock()
		if stopped {
			release()
			return Home{}, nil, ErrStopped
		}
		if err := s.makeRoom(m); err != nil {
			release()
			return Home{}, nil, err
		}
		p, err := s.start(ctx, dir)
		if err != nil {
			s.setFailed(m, err)
			release()
			return Home{}, nil, fmt.Errorf("member hermes: %w", err)
		}
		h := home(id, dir, p)
		if s.opts.Check != nil {
			if err := s.opts.Check(ctx, h); err != nil {
				p.stop(s.opts.StopGrace)
				s.setFailed(m, err)
				release()
				return Home{}, nil, fmt.Errorf("member hermes: %w", err)
			}
		}
		s.setFailed(m, nil)
		s.setProc(m, p)
		s.opts.Log.Info("started a member's hermes", "member", id, "url", p.url)
	}
	return home(id, dir, m.proc), release, nil
}

func home(id, dir string, p *process) Home {
	return Home{Member: id, URL: p.url, Key: p.key, WorkDir: filepath.Join(dir, workDir), Cwd: filepath.Join(Inside, workDir)}
}

// createdDir holds, per member, when their home was made (Unix ms): outside the homes, so
// no member's tool can change it.
const createdDir = ".created"

// made records when the member's home was made, once (on first use).
func (s *Supervisor) made(id string) error {
	dir := filepath.Join(s.opts.Root, createdDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, id), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = f.WriteString(strconv.FormatInt(time.Now().UnixMilli(), 10))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// madeAt is when the member's home was made (zero: unknown, or no home).
func (s *Supervisor) madeAt(id string) time.Time {
	b, err := os.ReadFile(filepath.Join(s.opts.Root, createdDir, id))
	if err != nil {
		return time.Time{}
	}
	ms, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// ForgetBefore forgets the member's home if it was made before t (a forget recorded at t
// must not delete the home of a user made again after it); no home: nothing to do.
func (s *Supervisor) ForgetBefore(ctx context.Context, id string, t time.Time) error {
	dir, err := s.Dir(id)
	if err != nil {
		return nil // no Appwrite id names no home
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) && !s.Running(id) {
		return nil
	}
	if at := s.madeAt(id); !at.IsZero() && !at.Before(t) {
		return nil
	}
	return s.Forget(ctx, id)
}

// start creates the member's home (on first use) and starts their Hermes in its sandbox.
// The config is made again from the template on every start (the operator's changes
// apply); sessions, memory, skills and the idempotency store are the member's and stay.
func (s *Supervisor) start(ctx context.Context, dir string) (*process, error) {
	if err := s.made(filepath.Base(dir)); err != nil {
		return nil, err
	}
	return s.launch(ctx, dir)
}

// launch makes the home's folders and config and starts its Hermes in its sandbox.
func (s *Supervisor) launch(ctx context.Context, dir string) (*process, error) {
	for _, d := range []string{dir, filepath.Join(dir, hermesDir), filepath.Join(dir, homeDir), filepath.Join(dir, workDir), filepath.Join(dir, tmpDir)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	tmpl, err := os.ReadFile(s.opts.Template)
	if err != nil {
		return nil, fmt.Errorf("hermes profile template: %w", err)
	}
	if err := s.templateKeyless(tmpl); err != nil {
		return nil, err
	}
	env, err := memberEnv(s.opts.Template, s.opts.GatewayKey, memberkey.Derive(s.opts.GatewayKey, filepath.Base(dir)))
	if err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(dir, hermesDir, ".env"), env); err != nil {
		return nil, err
	}
	if err := writePlugin(filepath.Join(dir, hermesDir)); err != nil {
		return nil, err
	}
	// The port is picked free, then Hermes binds it: between the two another process may
	// take it (Hermes then exits, "address already in use"). A port found taken after such
	// an exit is picked again; any other failure is the start's.
	for attempt := 1; ; attempt++ {
		port, err := pickPort()
		if err != nil {
			return nil, err
		}
		p, err := s.spawnOn(ctx, dir, tmpl, port)
		if err == nil || !errors.Is(err, errExited) || !portTaken(port) || attempt == portAttempts {
			return p, err
		}
		s.opts.Log.Warn("a member's hermes lost its port to another process; starting it on another", "port", port, "attempt", attempt)
	}
}

// templateKeyless refuses a template that holds the agent's gateway key itself.
func (s *Supervisor) templateKeyless(tmpl []byte) error {
	if s.opts.GatewayKey != "" && strings.Contains(string(tmpl), s.opts.GatewayKey) {
		return errors.New("the hermes profile template holds the gateway key itself: name it ${GATEWAY_API_KEY} (its .env), so each member gets their own")
	}
	return nil
}

// portAttempts bounds the starts of one launch that lose their port to another process.
const portAttempts = 3

// spawnOn writes the home's config for port and starts its Hermes in its sandbox.
func (s *Supervisor) spawnOn(ctx context.Context, dir string, tmpl []byte, port int) (*process, error) {
	cfg, err := memberConfig(tmpl, port)
	if err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(dir, hermesDir, "config.yaml"), cfg); err != nil {
		return nil, err
	}
	venv, _ := filepath.EvalSymlinks(s.opts.Venv)
	key := randomKey()
	sb := sandbox{Bwrap: s.opts.Bwrap, MemberDir: dir, ReadOnly: s.ro,
		Argv: []string{filepath.Join(venv, "bin", "hermes"), "gateway", "run"}}
	// Only what Hermes needs: nothing of the agent's environment (its Appwrite key, Redis
	// password, gateway key) is inherited.
	environ := []string{
		"PATH=" + filepath.Join(venv, "bin") + ":/usr/local/bin:/usr/bin:/bin",
		"HOME=" + filepath.Join(Inside, homeDir), "HERMES_HOME=" + filepath.Join(Inside, hermesDir),
		"TMPDIR=" + filepath.Join(Inside, tmpDir), "LANG=C.UTF-8", "TZ=UTC", "NO_COLOR=1",
		"API_SERVER_ENABLED=true", "API_SERVER_KEY=" + key,
		"API_SERVER_HOST=127.0.0.1", "API_SERVER_PORT=" + strconv.Itoa(port),
	}
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	return spawn(ctx, sb.args(), environ, filepath.Join(dir, "gateway.out"), url, key, s.opts.StartTimeout)
}

func writeFile(path string, b []byte) error {
	tmp := path + ".part"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// reap stops the Hermes of members no run has used for IdleAfter.
func (s *Supervisor) reap(now time.Time) {
	s.mu.Lock()
	var idle []*member
	for _, m := range s.members {
		if m.active == 0 && now.Sub(m.lastUsed) >= s.opts.IdleAfter {
			idle = append(idle, m)
		}
	}
	s.mu.Unlock()
	for _, m := range idle {
		m.mu.Lock()
		s.mu.Lock()
		still := m.active == 0 && now.Sub(m.lastUsed) >= s.opts.IdleAfter
		if still && m.proc == nil && s.members[m.id] == m && now.Sub(m.stopped) >= s.opts.IdleAfter {
			// Nothing running, nobody holding it, and idle for a while after its stop: a
			// member just stopped reads "idle" (Status) before it is forgotten here.
			delete(s.members, m.id)
		}
		s.mu.Unlock()
		if still && m.proc != nil {
			s.opts.Log.Info("stopping an idle member's hermes", "member", m.id)
			m.proc.stop(s.opts.StopGrace)
			s.setProc(m, nil)
			s.mu.Lock()
			m.stopped = time.Now()
			s.mu.Unlock()
		}
		m.mu.Unlock()
	}
}

// probeDir is Probe's home under Root: no member id starts with a dot.
const probeDir = ".probe"

// ProbeMember is the member a Probe Hermes's key names (agent/memberkey): no member's id.
// The gateway serves its calls only for a release probe bound while it runs.
const ProbeMember = probeDir

// Probe starts a Hermes exactly as a member's is started (config and .env from the
// template, the sandbox) in a home of its own that no member has, calls f with it, then
// stops it and deletes that home. Harness validation probes it when members run their own
// Hermes: what runs use is a Hermes made from the template, not the profile's baseUrl. It
// holds no member's data and its key (derived for ".probe") serves no run.
func (s *Supervisor) Probe(ctx context.Context, f func(Home) error) error {
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	s.mu.Lock()
	stopped := s.stopped
	s.mu.Unlock()
	if stopped {
		return ErrStopped
	}
	dir := filepath.Join(s.opts.Root, probeDir)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := s.launch(ctx, dir)
	if err != nil {
		return fmt.Errorf("probe hermes: %w", err)
	}
	defer p.stop(s.opts.StopGrace)
	return f(home(probeDir, dir, p))
}

// Running reports whether the member's Hermes is running now.
func (s *Supervisor) Running(id string) bool {
	s.mu.Lock()
	m := s.members[id]
	s.mu.Unlock()
	if m == nil {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.proc != nil && !m.proc.exited()
}

func (s *Supervisor) stopMember(m *member) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil {
		m.proc.stop(s.opts.StopGrace)
		s.setProc(m, nil)
	}
}

// Forget stops the member's Hermes and deletes their home: sessions, memory, skills, the
// idempotency store, their working folder with its inputs and outputs. Runs of theirs
// still going lose their Hermes (forgetting a member ends their work). A later Acquire
// starts from an empty home.
func (s *Supervisor) Forget(ctx context.Context, id string) error {
	dir, err := s.Dir(id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	m := s.members[id]
	if m == nil {
		m = &member{id: id}
		s.members[id] = m // held while forgetting: an Acquire waits on its mu
	}
	s.mu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil {
		m.proc.stop(s.opts.StopGrace)
		s.setProc(m, nil)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("forget member home: %w", err)
	}
	if err := os.Remove(filepath.Join(s.opts.Root, createdDir, id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("forget member home: %w", err)
	}
	s.opts.Log.Info("forgot a member's hermes home", "member", id)
	return ctx.Err()
}
