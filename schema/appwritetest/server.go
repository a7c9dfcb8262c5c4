package appwritetest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure an emulator.
type Options struct {
	// ProjectID is the one project this emulator serves (X-Appwrite-Project).
	ProjectID string
	// Origins are the web origins allowed to call with credentials (Appwrite's web
	// platforms, e.g. "http://127.0.0.1:8080"). A request from the emulator's own origin
	// is always allowed; any other origin gets no CORS headers, so a browser refuses it.
	Origins []string
	// Keys maps an API key secret to its scopes.
	Keys map[string][]string
	// DataDir, when set, makes state durable across restarts (state.json + file blobs).
	DataDir string
	// ProcessingDelay is how long a new attribute or index stays "processing" before it
	// becomes "available" (Appwrite does this in a worker). Zero means 50 ms.
	ProcessingDelay time.Duration
	// StorageLimit is _APP_STORAGE_LIMIT (default 30,000,000 bytes).
	StorageLimit int64
	// JWTSecret signs account JWTs; a random one is made when empty.
	JWTSecret []byte
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Logger; discards when nil.
	Logger *slog.Logger
	// Engine is the storage engine to model (doc.go). Empty is $PA_APPWRITE_ENGINE
	// (EngineEnv), and when that is unset too DefaultEngine (mongodb, as in Appwrite
	// 1.9.6): so make dev, make emulator and every test switch engine together.
	Engine Engine
	// RateLimits overrides the engine's abuse limits (on with the upstream numbers for
	// mongodb and mariadb, off for ideal). NoRateLimits() turns them off.
	RateLimits *RateLimits
	// StorageDevice is the bucket storage device type; empty is DeviceLocal.
	StorageDevice StorageDevice
}

// ChunkSize is APP_LIMIT_UPLOAD_CHUNK_SIZE: every chunk but the last is exactly this big.
const ChunkSize = 5 * 1024 * 1024

// Server is an in-process Appwrite 1.9.6 emulator. It is an http.Handler.
type Server struct {
	opts   Options
	prof   profile
	limits RateLimits
	abuse  *limiter
	mux    *http.ServeMux

	down  atomic.Bool
	mu    sync.Mutex
	st    *state
	dirty chan struct{}
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
}

// New builds an emulator, loading state from opts.DataDir when it holds any.
func New(opts Options) (*Server, error) {
	if opts.ProjectID == "" {
		return nil, fmt.Errorf("appwritetest: ProjectID is required")
	}
	if opts.ProcessingDelay == 0 {
		opts.ProcessingDelay = 50 * time.Millisecond
	}
	if opts.StorageLimit == 0 {
		opts.StorageLimit = 30_000_000
	}
	if len(opts.JWTSecret) == 0 {
		opts.JWTSecret = []byte(randomHex(32))
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Engine == "" {
		opts.Engine = Engine(os.Getenv(EngineEnv))
	}
	eng, err := ParseEngine(string(opts.Engine))
	if err != nil {
		return nil, err
	}
	opts.Engine = eng
	switch opts.StorageDevice {
	case "":
		opts.StorageDevice = DeviceLocal
	case DeviceLocal, DeviceS3:
	default:
		return nil, fmt.Errorf("appwritetest: unknown storage device %q (want local or s3)", opts.StorageDevice)
	}
	prof := profileFor(eng)
	limits := prof.rateLimits
	if opts.RateLimits != nil {
		limits = *opts.RateLimits
	}
	s := &Server{
		opts:   opts,
		prof:   prof,
		limits: limits,
		abuse:  newLimiter(opts.Now),
		st:     newState(),
		dirty:  make(chan struct{}, 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	if opts.DataDir != "" {
		if err := s.load(); err != nil {
			return nil, err
		}
	}
	s.routes()
	go s.flusher()
	return s, nil
}

// Close flushes state to the data directory and stops the background writer.
func (s *Server) Close() error {
	s.once.Do(func() { close(s.stop) })
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.flushLocked()
}

func (s *Server) flusher() {
	defer close(s.done)
	var cost time.Duration // what the last snapshot took
	for {
		select {
		case <-s.stop:
			return
		case <-s.dirty:
			// Debounce: a burst of writes becomes one snapshot, and snapshots take at most
			// a tenth of the time however big the state grows.
			select {
			case <-time.After(max(50*time.Millisecond, 9*cost)):
			case <-s.stop:
				return
			}
			// Taken under the lock, written without it: requests wait only while the
			// documents written since the last snapshot are encoded (snapshot.go).
			start := time.Now()
			s.mu.Lock()
			snap, err := s.snapshotLocked()
			s.mu.Unlock()
			if err == nil && snap != nil {
				err = s.writeSnapshot(snap)
			}
			cost = time.Since(start)
			if err != nil {
				s.opts.Logger.Error("appwrite emulator: write snapshot", "err", err)
			}
		}
	}
}

// changed marks state dirty; call with s.mu held.
func (s *Server) changed() {
	select {
	case s.dirty <- struct{}{}:
	default:
	}
}

func (s *Server) now() time.Time { return s.opts.Now().UTC() }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.down.Load() {
		// An outage as clients see it: Appwrite's 503 for a service that cannot answer.
		writeError(w, errf(503, "general_service_disabled", "The requested service is currently unavailable."))
		return
	}
	s.mux.ServeHTTP(w, r)
}

// SetDown makes every request fail with 503 until SetDown(false): an outage for tests.
func (s *Server) SetDown(down bool) { s.down.Store(down) }

// request context ----------------------------------------------------------------------

type callerKind int

const (
	guestCaller callerKind = iota
	userCaller
	keyCaller
)

type caller struct {
	kind    callerKind
	user    *user
	session *session // the session proven by a cookie/secret (nil for JWT callers)
	viaJWT  bool
	scopes  map[string]bool // key scopes
}

// roles returns the permission roles the caller holds (Appwrite's Authorization roles).
func (c *caller) roles() []string {
	switch c.kind {
	case userCaller:
		r := []string{"any", "users", "user:" + c.user.ID}
		if c.user.EmailVerification {
			r = append(r, "users/verified", "user:"+c.user.ID+"/verified")
		} else {
			r = append(r, "users/unverified", "user:"+c.user.ID+"/unverified")
		}
		for _, l := range c.user.Labels {
			r = append(r, "label:"+l)
		}
		return r
	case guestCaller:
		return []string{"any", "guests"}
	}
	return nil
}

var guestScopes = set("global", "public", "home", "console", "graphql", "sessions.write",
	"documents.read", "documents.write", "files.read", "files.write", "locale.read",
	"avatars.read", "execution.write")

var userScopes = set("global", "public", "home", "console", "graphql", "sessions.write",
	"account", "teams.read", "teams.write", "documents.read", "documents.write", "files.read",
	"files.write", "projects.write", "locale.read", "avatars.read", "execution.read",
	"execution.write", "targets.read", "targets.write", "subscribers.write", "subscribers.read")

func set(xs ...string) map[string]bool {
	m := make(map[string]bool, len(xs))
	for _, x := range xs {
		m[x] = true
	}
	return m
}

func (c *caller) has(scope string) bool {
	switch c.kind {
	case keyCaller:
		return c.scopes[scope] || scope == "public" || scope == "global"
	case userCaller:
		return userScopes[scope]
	}
	return guestScopes[scope]
}

func (s *Server) scopeError(c *caller, scope string) *apiError {
	switch c.kind {
	case keyCaller:
		return errf(401, "general_unauthorized_scope", "app.%s@service.localhost (role: applications) missing scopes ([\"%s\"])", s.opts.ProjectID, scope)
	case userCaller:
		return errf(401, "general_unauthorized_scope", "%s (role: users) missing scopes ([\"%s\"])", c.user.Email, scope)
	}
	return errf(401, "general_unauthorized_scope", "User (role: guests) missing scopes ([\"%s\"])", scope)
}

type handlerFunc func(w http.ResponseWriter, r *http.Request, c *caller) error

// handle registers a route that needs scope. The caller is resolved the way Appwrite's
// request resource does it: session (cookie, fallback cookie, X-Appwrite-Session), then
// JWT; an API key replaces whatever user was found.
func (s *Server) handle(pattern, scope string, h handlerFunc) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		s.cors(w, r)
		if err := s.checkProject(r, scope); err != nil {
			writeError(w, err)
			return
		}
		s.mu.Lock()
		c, err := s.resolveCaller(r)
		s.mu.Unlock()
		if err != nil {
			writeError(w, err)
			return
		}
		if !c.has(scope) {
			writeError(w, s.scopeError(c, scope))
			return
		}
		if err := h(w, r, c); err != nil {
			writeError(w, err)
		}
	})
}

// originAllowed: the emulator's own origin or one of Options.Origins (never any origin
// with credentials, which would let every web page act as the signed-in user).
func (s *Server) originAllowed(r *http.Request, o string) bool {
	if o == "http://"+r.Host || o == "https://"+r.Host {
		return true
	}
	for _, a := range s.opts.Origins {
		if strings.TrimRight(a, "/") == o {
			return true
		}
	}
	return false
}

func (s *Server) cors(w http.ResponseWriter, r *http.Request) {
	if o := r.Header.Get("Origin"); o != "" && s.originAllowed(r, o) {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", o)
		h.Set("Access-Control-Allow-Credentials", "true")
		h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE")
		h.Set("Access-Control-Allow-Headers", "Origin, Cookie, Set-Cookie, X-Requested-With, Content-Type, Access-Control-Allow-Origin, Access-Control-Request-Headers, Accept, X-Appwrite-Project, X-Appwrite-Key, X-Appwrite-Dev-Key, X-Appwrite-Locale, X-Appwrite-Mode, X-Appwrite-JWT, X-Appwrite-Response-Format, X-Appwrite-Timeout, X-SDK-Version, X-SDK-Name, X-SDK-Language, X-SDK-Platform, X-SDK-GraphQL, X-Appwrite-ID, X-Appwrite-Timestamp, Content-Range, Range, Cache-Control, Expires, Pragma, X-Appwrite-Session, X-Fallback-Cookies, X-Forwarded-For, X-Forwarded-User-Agent")
		h.Set("Access-Control-Expose-Headers", "X-Appwrite-Session, X-Fallback-Cookies")
	}
}

func (s *Server) checkProject(r *http.Request, scope string) error {
	p := r.Header.Get("X-Appwrite-Project")
	if p == "" {
		p = r.URL.Query().Get("project")
	}
	if p == "" || p == "console" {
		if scope == "public" {
			return nil
		}
		// The console project: a guest of it holds none of the project scopes.
		return errf(401, "general_unauthorized_scope", "User (role: guests) missing scopes ([\"%s\"])", scope)
	}
	if p != s.opts.ProjectID {
		return errf(404, "project_not_found", "Project with the requested ID could not be found. Please check the value of the X-Appwrite-Project header to ensure the correct project ID is being used.")
	}
	return nil
}

func (s *Server) sessionCookieName() string { return "a_session_" + s.opts.ProjectID }

// sessionSecret finds a session secret in the request, if any.
func (s *Server) sessionSecret(r *http.Request) string {
	if ck, err := r.Cookie(s.sessionCookieName()); err == nil && ck.Value != "" {
		return ck.Value
	}
	if fb := r.Header.Get("X-Fallback-Cookies"); fb != "" {
		var m map[string]string
		if json.Unmarshal([]byte(fb), &m) == nil && m[s.sessionCookieName()] != "" {
			return m[s.sessionCookieName()]
		}
	}
	return r.Header.Get("X-Appwrite-Session")
}

func (s *Server) resolveCaller(r *http.Request) (*caller, error) {
	c := &caller{kind: guestCaller}
	secret := s.sessionSecret(r)
	jwt := r.Header.Get("X-Appwrite-JWT")
	if secret != "" {
		for _, se := range s.st.Sessions {
			if se.Secret == secret && se.Expire.After(s.now()) {
				if u := s.st.Users[se.UserID]; u != nil {
					c = &caller{kind: userCaller, user: u, session: se}
				}
				break
			}
		}
	}
	if jwt != "" {
		if secret != "" {
			return nil, errf(403, "user_jwt_and_cookie_set", "Cannot use JWT and cookie at the same time.")
		}
		claims, ok := s.verifyJWT(jwt)
		if !ok {
			return nil, errf(401, "user_jwt_invalid", "Invalid JWT token.")
		}
		u := s.st.Users[claims.UserID]
		se := s.st.Sessions[claims.SessionID]
		if u != nil && se != nil && se.UserID == u.ID && se.Expire.After(s.now()) {
			c = &caller{kind: userCaller, user: u, viaJWT: true}
		}
	}
	if c.kind == userCaller {
		// The caller keeps the user as the request found it (Appwrite resolves the user
		// once, at the start of a request): handlers read it after the lock is released,
		// while another request may change the stored one. Labels and prefs are replaced
		// whole, never changed in place, so a shallow copy is enough.
		u := *c.user
		c.user = &u
	}
	if c.kind == userCaller && !c.user.Status {
		return nil, errf(403, "user_blocked", "The current user has been blocked.")
	}
	if key := r.Header.Get("X-Appwrite-Key"); key != "" {
		scopes, ok := s.opts.Keys[key]
		if !ok {
			return nil, errf(401, "user_unauthorized", "The current user is not authorized to perform the requested action.")
		}
		return &caller{kind: keyCaller, scopes: set(scopes...)}, nil
	}
	return c, nil
}

// helpers ----------------------------------------------------------------------------

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// uniqueID makes an ID shaped like Appwrite's ID.unique(): 20 hex characters.
func uniqueID() string { return randomHex(10) }

var customIDRe = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]{0,35}$`)

// resolveID applies Appwrite's CustomId validator: unique() or ≤36 of [a-zA-Z0-9._-],
// not starting with a special character.
func resolveID(param, v string) (string, error) {
	if v == "unique()" {
		return uniqueID(), nil
	}
	if !customIDRe.MatchString(v) {
		return "", errArgument(param, "Parameter must contain at most 36 chars. Valid chars are a-z, A-Z, 0-9, period, hyphen, and underscore. Can't start with a special char")
	}
	return v, nil
}

// readBody decodes a JSON body into a map with json.Number values.
func readBody(r *http.Request) (map[string]any, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, 12<<20+1))
	if err != nil {
		return nil, errf(400, "general_argument_invalid", "Invalid request body")
	}
	if len(b) > 12<<20 {
		return nil, errf(413, "general_argument_invalid", "Request body too large")
	}
	m := map[string]any{}
	if len(bytes.TrimSpace(b)) == 0 {
		return m, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return nil, errf(400, "general_argument_invalid", "Invalid JSON body")
	}
	return m, nil
}

func str(m map[string]any, k string) (string, bool) {
	v, ok := m[k]
	if !ok || v == nil {
		return "", false
	}
	s, ok := v.(string)
	return s, ok
}

func boolean(m map[string]any, k string, def bool) (bool, error) {
	v, ok := m[k]
	if !ok || v == nil {
		return def, nil
	}
	switch x := v.(type) {
	case bool:
		return x, nil
	case string:
		switch x {
		case "true", "1":
			return true, nil
		case "false", "0":
			return false, nil
		}
	}
	return false, errArgument(k, "Value must be a valid boolean")
}

func strList(m map[string]any, k string) ([]string, bool, error) {
	v, ok := m[k]
	if !ok || v == nil {
		return nil, false, nil
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, true, errArgument(k, "Value must be a valid array")
	}
	out := make([]string, 0, len(arr))
	for _, e := range arr {
		s, ok := e.(string)
		if !ok {
			return nil, true, errArgument(k, "Value must be a valid array of strings")
		}
		out = append(out, s)
	}
	return out, true, nil
}

func intParam(m map[string]any, k string) (int64, bool, error) {
	v, ok := m[k]
	if !ok || v == nil {
		return 0, false, nil
	}
	switch x := v.(type) {
	case json.Number:
		n, err := x.Int64()
		if err != nil {
			return 0, true, errArgument(k, "Value must be a valid integer")
		}
		return n, true, nil
	case string:
		var n int64
		if _, err := fmt.Sscan(x, &n); err != nil {
			return 0, true, errArgument(k, "Value must be a valid integer")
		}
		return n, true, nil
	}
	return 0, true, errArgument(k, "Value must be a valid integer")
}

func floatParam(m map[string]any, k string) (float64, bool, error) {
	v, ok := m[k]
	if !ok || v == nil {
		return 0, false, nil
	}
	if x, ok := v.(json.Number); ok {
		f, err := x.Float64()
		if err == nil {
			return f, true, nil
		}
	}
	return 0, true, errArgument(k, "Value must be a valid float")
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// permission parsing: `read("user:abc")` → ("read", "user:abc").
var permRe = regexp.MustCompile(`^(read|create|update|delete|write)\("([^"]+)"\)$`)

var roleRe = regexp.MustCompile(`^(any|guests|users|users/verified|users/unverified|user:[a-zA-Z0-9._-]+(/verified|/unverified)?|team:[a-zA-Z0-9._-]+(/[a-zA-Z0-9._-]+)?|member:[a-zA-Z0-9._-]+|label:[a-zA-Z0-9]+)$`)

func validatePermissions(param string, perms []string, allowed ...string) error {
	for _, p := range perms {
		m := permRe.FindStringSubmatch(p)
		if m == nil || !roleRe.MatchString(m[2]) {
			return errArgument(param, "Permission \"%s\" is not allowed. Must be one of: %s.", p, strings.Join(allowed, ", "))
		}
		ok := false
		for _, a := range allowed {
			if a == m[1] {
				ok = true
			}
		}
		if !ok {
			return errArgument(param, "Permission \"%s\" is not allowed. Must be one of: %s.", p, strings.Join(allowed, ", "))
		}
	}
	return nil
}

// holds reports whether any of perms grants action to any of roles (write = update+delete).
func holds(perms []string, action string, roles []string) bool {
	for _, p := range perms {
		m := permRe.FindStringSubmatch(p)
		if m == nil {
			continue
		}
		act := m[1]
		if act != action && !(act == "write" && (action == "update" || action == "delete")) {
			continue
		}
		for _, r := range roles {
			if r == m[2] {
				return true
			}
		}
	}
	return false
}

// expandPermissions turns write(x) into update(x)+delete(x), as Appwrite stores them.
func expandPermissions(perms []string) []string {
	out := []string{}
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, p := range perms {
		m := permRe.FindStringSubmatch(p)
		if m != nil && m[1] == "write" {
			add(`update("` + m[2] + `")`)
			add(`delete("` + m[2] + `")`)
			continue
		}
		add(p)
	}
	return out
}

// checkGrantable enforces that a user may only grant roles they hold themselves.
func checkGrantable(c *caller, perms []string) error {
	if c.kind == keyCaller {
		return nil
	}
	roles := c.roles()
	for _, p := range perms {
		m := permRe.FindStringSubmatch(p)
		if m == nil {
			continue
		}
		ok := false
		for _, r := range roles {
			if r == m[2] {
				ok = true
			}
		}
		if !ok {
			return errf(401, "user_unauthorized", "Permissions must be one of: (%s)", strings.Join(quoteAll(roles), ", "))
		}
	}
	return nil
}

func quoteAll(xs []string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = `"` + x + `"`
	}
	return out
}

func (s *Server) routes() {
	s.mux = http.NewServeMux()
	s.routesAccount()
	s.routesDatabases()
	s.routesDocuments()
	s.routesStorage()
	s.routesFileList()  // filelist.go
	s.routesFunctions() // functions.go
	s.mux.HandleFunc("OPTIONS /", func(w http.ResponseWriter, r *http.Request) {
		s.cors(w, r)
		w.WriteHeader(204)
	})
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.cors(w, r)
		writeError(w, errRoute())
	})
}
