package deploy_test

import (
	"bufio"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"privateassistant/agent/daemon"
	"privateassistant/agent/gpu"
	"privateassistant/functions/service"
	"privateassistant/keyref"
	"privateassistant/runconfig"
	"privateassistant/stream"
)

// The shipped configuration, loaded together: .env.example (functions, tools, dev),
// deploy/agent.env.example (the GPU host), the bootstrap file, the GPU file, Hermes's
// config and env, both proxies, the Redis and Sentinel configs, the ACL users, the
// systemd units, and the code they name.
type shipped struct {
	env, agentEnv map[string]string
	boot          *runconfig.BootstrapFile
	gpu           *gpu.Config
	hermes        hermesConfig
	hermesEnv     map[string]string
	redis         map[string][]string
	sentinel      map[string][]string
	aclUsers      map[string]string
}

type hermesConfig struct {
	Gateway struct {
		APIServer struct {
			Enabled       bool   `yaml:"enabled"`
			Host          string `yaml:"host"`
			Port          int    `yaml:"port"`
			MaxConcurrent int    `yaml:"max_concurrent_runs"`
		} `yaml:"api_server"`
	} `yaml:"gateway"`
	Model struct {
		Provider      string `yaml:"provider"`
		BaseURL       string `yaml:"base_url"`
		Default       string `yaml:"default"`
		APIKey        string `yaml:"api_key"`
		ContextLength int64  `yaml:"context_length"`
	} `yaml:"model"`
	Delegation struct {
		BaseURL             string `yaml:"base_url"`
		Model               string `yaml:"model"`
		FallbackProviders   []any  `yaml:"fallback_providers"`
		MaxSpawnDepth       int    `yaml:"max_spawn_depth"`
		OrchestratorEnabled *bool  `yaml:"orchestrator_enabled"`
		APIKey              string `yaml:"api_key"`
		MaxChildren         int    `yaml:"max_concurrent_children"`
		AutoApprove         *bool  `yaml:"subagent_auto_approve"`
	} `yaml:"delegation"`
	// Auxiliary tasks: harness validation checks them (deploy/hermesprofile_test.go).
	Auxiliary        map[string]map[string]any `yaml:"auxiliary"`
	PlatformToolsets map[string][]string       `yaml:"platform_toolsets"`
	Tools            struct {
		ToolSearch struct {
			Enabled string `yaml:"enabled"`
		} `yaml:"tool_search"`
	} `yaml:"tools"`
	Terminal struct {
		Cwd string `yaml:"cwd"`
	} `yaml:"terminal"`
	MCPServers map[string]struct {
		URL     string            `yaml:"url"`
		Headers map[string]string `yaml:"headers"`
	} `yaml:"mcp_servers"`
	Approvals struct {
		Mode    string `yaml:"mode"`
		Timeout int    `yaml:"timeout"`
	} `yaml:"approvals"`
	// The settings that keep Hermes local (agent/validator LocalOnly; hermesprofile_test.go).
	ModelCatalog map[string]any `yaml:"model_catalog"`
	Updates      map[string]any `yaml:"updates"`
	Plugins      map[string]any `yaml:"plugins"`
	Security     map[string]any `yaml:"security"`
	Telemetry    map[string]any `yaml:"telemetry"`
	Monitoring   map[string]any `yaml:"monitoring"`
}

func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		require.True(t, ok, "%s: %q is not NAME=value", path, line)
		_, dup := out[k]
		require.False(t, dup, "%s: %s twice", path, k)
		out[k] = v
	}
	require.NoError(t, sc.Err())
	return out
}

// readDirectives reads a redis.conf-style file as directive → arguments (repeated
// directives append; "sentinel monitor" and friends are keyed by their first two words).
func readDirectives(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	out := map[string][]string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		k := f[0]
		if k == "sentinel" {
			k, f = "sentinel "+f[1], f[1:]
		}
		out[k] = append(out[k], f[1:]...)
	}
	return out
}

func load(t *testing.T) *shipped {
	t.Helper()
	s := &shipped{env: readEnvFile(t, "../.env.example"), agentEnv: readEnvFile(t, "agent.env.example"),
		hermesEnv: readEnvFile(t, "hermes/hermes.env.example"),
		redis:     readDirectives(t, "redis.conf"), sentinel: readDirectives(t, "sentinel.conf"), aclUsers: map[string]string{}}
	b, err := os.ReadFile("bootstrap.example.json")
	require.NoError(t, err)
	s.boot, err = runconfig.ParseBootstrap(b)
	require.NoError(t, err)
	s.gpu, err = gpu.LoadConfig("gpu.example.json")
	require.NoError(t, err)
	b, err = os.ReadFile("hermes/config.yaml")
	require.NoError(t, err)
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&s.hermes))
	for _, line := range shippedACL(t) {
		f := strings.Fields(line)
		require.Equal(t, "user", f[0])
		s.aclUsers[f[1]] = line
	}
	return s
}

func (s *shipped) route(alias string) (device, model string, budget int64, ok bool) {
	for _, r := range s.boot.Routes {
		if r.Alias == alias {
			return r.Device, r.BackendModel, r.ContextBudget, true
		}
	}
	return "", "", 0, false
}

func (s *shipped) device(name string) *gpu.DeviceConfig {
	for i := range s.gpu.Devices {
		if s.gpu.Devices[i].Name == name {
			return &s.gpu.Devices[i]
		}
	}
	return nil
}

// TestRoutesDevicesAndModelsAgree: each route's device is in the GPU file and serves its
// backend model with at least the route's budget; the agent serves exactly the GPU file's
// devices with their slots; the chat device is the chat route's; the functions know the
// devices routes may name.
func TestRoutesDevicesAndModelsAgree(t *testing.T) {
	t.Parallel()
	s := load(t)
	for _, r := range s.boot.Routes {
		d := s.device(r.Device)
		require.NotNil(t, d, "route %s names device %s, which deploy/gpu.example.json does not define", r.RouteID, r.Device)
		spec, ok := d.Models[r.BackendModel]
		require.True(t, ok, "route %s names model %s, which device %s does not serve", r.RouteID, r.BackendModel, r.Device)
		require.GreaterOrEqual(t, spec.Context, r.ContextBudget, "route %s: the model's context must hold the route's budget", r.RouteID)
		require.NotNil(t, r.LocalOnly)
		require.True(t, *r.LocalOnly, "route %s: local only (no cloud fallback)", r.RouteID)
	}
	devs, err := daemon.ParseDevices(s.agentEnv["PA_AGENT_DEVICES"])
	require.NoError(t, err)
	want := map[string]int{}
	var names []string
	for _, d := range s.gpu.Devices {
		want[d.Name] = d.Slots
		names = append(names, d.Name)
	}
	require.Equal(t, want, devs, "PA_AGENT_DEVICES serves the GPU file's devices with their slots")
	require.Equal(t, s.agentEnv["PA_AGENT_DEVICES"], s.env["PA_AGENT_DEVICES"])
	chatDev, _, _, ok := s.route("chat")
	require.True(t, ok, "a chat route")
	require.Equal(t, chatDev, s.agentEnv["PA_AGENT_CHAT_DEVICE"])
	require.Equal(t, chatDev, s.env["PA_AGENT_CHAT_DEVICE"])
	known := strings.Split(s.env["PA_KNOWN_DEVICES"], ",")
	sort.Strings(known)
	sort.Strings(names)
	require.Equal(t, names, known, "PA_KNOWN_DEVICES")
	// Immich shares the XTX (heavy work), not the chat GPU.
	require.NotNil(t, s.device("xtx").Immich)
	require.Nil(t, s.device(chatDev).Immich)
	require.Empty(t, s.device("xtx").DrainTimeout, "a swap never cuts running work by default")
}

// TestHarnessesGoThroughTheGateway: the direct harness and Hermes (model and delegation)
// call the agent's gateway, never a model server; Hermes's model names are route
// aliases; the roles that use tools run on Hermes; the agent reaches Hermes where its
// API server listens.
func TestHarnessesGoThroughTheGateway(t *testing.T) {
	t.Parallel()
	s := load(t)
	gw := s.agentEnv["PA_GATEWAY_ADDR"]
	require.Equal(t, gw, s.env["PA_GATEWAY_ADDR"])
	// Hermes's one work folder is where the agent collects a run's files from.
	require.NotEmpty(t, s.hermes.Terminal.Cwd, "deploy/hermes/config.yaml terminal.cwd")
	require.Equal(t, s.hermes.Terminal.Cwd, s.agentEnv["PA_AGENT_HERMES_WORKDIR"])
	require.Equal(t, s.hermes.Terminal.Cwd, s.env["PA_AGENT_HERMES_WORKDIR"])
	f, _ := reflect.TypeOf(daemon.Settings{}).FieldByName("GatewayAddr")
	require.Equal(t, f.Tag.Get("default"), gw, "the gateway's default address")
	gwURL := "http://" + gw + "/v1"
	var backends []string
	for _, d := range s.gpu.Devices {
		if d.Backend.URL != "" {
			u, err := url.Parse(d.Backend.URL)
			require.NoError(t, err)
			backends = append(backends, u.Host)
		}
	}

	kinds := map[string]string{}
	for _, h := range s.boot.Harnesses {
		kinds[h.ProfileID] = h.Kind
		u, err := url.Parse(h.BaseURL)
		require.NoError(t, err)
		require.NotContains(t, backends, u.Host, "harness %s must not call a model server", h.ProfileID)
		switch h.Kind {
		case "direct":
			require.Equal(t, gwURL, h.BaseURL, "the direct harness calls the gateway")
			require.Equal(t, "PA_GATEWAY_API_KEY", keyref.Parse(h.KeyRef).Name, "the direct harness presents the gateway's key")
		case "hermes":
			api := s.hermes.Gateway.APIServer
			require.True(t, api.Enabled)
			require.Equal(t, net.JoinHostPort(api.Host, strconv.Itoa(api.Port)), u.Host, "the agent calls Hermes where its API server listens")
			ref := keyref.Parse(h.KeyRef)
			require.Equal(t, keyref.Env, ref.Source, "an env reference, so the admin function's probe can resolve it too")
			_, ok := s.agentEnv[ref.Name]
			require.True(t, ok, "the agent's environment holds %s", ref.Name)
		}
	}
	require.Equal(t, gwURL, s.hermes.Model.BaseURL, "Hermes's only model provider is the gateway")
	require.Equal(t, gwURL, s.hermes.Delegation.BaseURL, "native delegation cannot bypass the routes")
	require.NotNil(t, s.hermes.Delegation.FallbackProviders, "a child gets no fallback provider (an empty list, not inherited)")
	require.Empty(t, s.hermes.Delegation.FallbackProviders)
	require.Equal(t, 1, s.hermes.Delegation.MaxSpawnDepth, "children spawn no children")
	require.NotNil(t, s.hermes.Delegation.OrchestratorEnabled)
	require.False(t, *s.hermes.Delegation.OrchestratorEnabled)
	require.NotNil(t, s.hermes.Delegation.AutoApprove)
	require.False(t, *s.hermes.Delegation.AutoApprove, "a child's risky tool is never approved unseen")
	require.Equal(t, "${GATEWAY_API_KEY}", s.hermes.Delegation.APIKey, "children present the gateway's key")
	// Delegation as application jobs: the profile loads the agent's MCP job server.
	mcpSrv, loaded := s.hermes.MCPServers[daemon.MCPServerName]
	require.True(t, loaded, "the profile loads the MCP job server as %q", daemon.MCPServerName)
	mu, err := url.Parse(mcpSrv.URL)
	require.NoError(t, err)
	require.Equal(t, s.agentEnv["PA_MCP_ADDR"], mu.Host, "Hermes calls the MCP job server where the agent serves it")
	require.Equal(t, "Bearer ${GATEWAY_API_KEY}", mcpSrv.Headers["Authorization"], "the MCP job server checks the gateway's key")
	for _, m := range []string{s.hermes.Model.Default, s.hermes.Delegation.Model} {
		_, _, _, ok := s.route(m)
		require.True(t, ok, "Hermes model %q is a route alias", m)
	}
	for _, r := range s.boot.Routes {
		require.LessOrEqual(t, s.hermes.Model.ContextLength, r.ContextBudget, "Hermes's context fits route %s", r.Alias)
	}
	require.GreaterOrEqual(t, s.hermes.Model.ContextLength, int64(65536), "Hermes refuses less than 64K")
	require.Equal(t, "${GATEWAY_API_KEY}", s.hermes.Model.APIKey)
	_, ok := s.hermesEnv["GATEWAY_API_KEY"]
	require.True(t, ok, "hermes.env.example holds the gateway key")
	require.Equal(t, "manual", s.hermes.Approvals.Mode)

	for name, r := range s.boot.Roles {
		if len(r.Tools) > 0 {
			require.Equal(t, "hermes", kinds[r.Harness], "role %s uses tools: the direct harness has none", name)
		}
		for _, tool := range r.Tools {
			require.Contains(t, s.boot.ToolCeiling, tool, "role %s", name)
		}
		// Validation verifies a Hermes profile only if every toolset its API server offers
		// is inside the ceiling and the policy of each role bound to it
		// (settings/toolsets.go): the example profile offers exactly that.
		if kinds[r.Harness] == "hermes" {
			offered := s.hermes.PlatformToolsets["api_server"]
			require.NotEmpty(t, offered, "deploy/hermes/config.yaml platform_toolsets.api_server")
			for _, ts := range offered {
				require.Contains(t, r.Tools, ts, "role %s is bound to a profile offering %s", name, ts)
				require.Contains(t, s.boot.ToolCeiling, ts)
			}
		}
	}
}

// TestSecretsAreNamedWhereTheyAreKept: every credential a file names by variable is in
// the environment of the process that reads it, and no example holds a value.
func TestSecretsAreNamedWhereTheyAreKept(t *testing.T) {
	t.Parallel()
	s := load(t)
	for _, d := range s.gpu.Devices {
		for _, name := range []string{d.Backend.APIKeyEnv, func() string {
			if d.Immich != nil {
				return d.Immich.APIKeyEnv
			}
			return ""
		}()} {
			if name == "" {
				continue
			}
			v, ok := s.agentEnv[name]
			require.True(t, ok, "device %s names %s: deploy/agent.env.example must hold it", d.Name, name)
			require.Empty(t, v, "%s is a secret: no value in an example", name)
		}
	}
	for _, env := range []map[string]string{s.env, s.agentEnv, s.hermesEnv} {
		for k, v := range env {
			if strings.Contains(k, "KEY") || strings.Contains(k, "PASSWORD") && !strings.HasSuffix(k, "_REF") {
				require.Empty(t, v, "%s is a secret: no value in an example", k)
			}
			require.False(t, runconfig.LooksLikeSecret(v) && strings.HasSuffix(k, "_REF"), "%s", k)
		}
	}
	require.True(t, strings.HasPrefix(s.agentEnv["PA_REDIS_PASSWORD_REF"], "file:"), "the agent keeps its Redis password in a file")
}

// TestRedisIsReachableAcrossHostsWithTLSAndUsers: Redis listens with TLS only on the
// address the functions and the agent dial, on the port they dial; each component's
// Redis user exists in the ACL file; the default user is off; Sentinel watches that
// primary on the same port.
func TestRedisIsReachableAcrossHostsWithTLSAndUsers(t *testing.T) {
	t.Parallel()
	s := load(t)
	require.Equal(t, []string{"0"}, s.redis["port"], "no plaintext port")
	tlsPort := s.redis["tls-port"][0]
	for _, env := range []map[string]string{s.env, s.agentEnv} {
		host, port, err := net.SplitHostPort(env["PA_REDIS_ADDR"])
		require.NoError(t, err)
		require.Equal(t, tlsPort, port)
		require.Contains(t, s.redis["bind"], host, "Redis listens where %s dials", env["PA_REDIS_ADDR"])
		require.Equal(t, "true", env["PA_REDIS_TLS"])
		line, ok := s.aclUsers[env["PA_REDIS_USERNAME"]]
		require.True(t, ok, "user %s is in deploy/redis-users.acl", env["PA_REDIS_USERNAME"])
		require.Contains(t, strings.Fields(line), "on")
	}
	fnHost, _, _ := net.SplitHostPort(s.env["PA_REDIS_ADDR"])
	require.NotEqual(t, "127.0.0.1", fnHost, "Appwrite's function containers cannot reach the GPU host's loopback")
	require.NotEqual(t, s.env["PA_REDIS_USERNAME"], s.agentEnv["PA_REDIS_USERNAME"], "one user per component")
	require.Contains(t, s.aclUsers["default"], " off ")
	require.Equal(t, []string{"yes"}, s.redis["tls-replication"])
	require.Equal(t, []string{"noeviction"}, s.redis["maxmemory-policy"])
	require.Equal(t, []string{"yes"}, s.redis["appendonly"])
	require.Equal(t, []string{"/etc/privateassistant/redis-users.acl"}, s.redis["aclfile"])
	require.Contains(t, s.redis["tls-ca-cert-file"][0], s.agentEnv["PA_REDIS_TLS_CA"])

	mon := s.sentinel["sentinel monitor"]
	require.Equal(t, "pa-queue", mon[0])
	require.Contains(t, s.redis["bind"], mon[1])
	require.Equal(t, tlsPort, mon[2])
	require.Equal(t, []string{"pa-queue", "pa-sentinel"}, s.sentinel["sentinel auth-user"])
	_, ok := s.aclUsers["pa-sentinel"]
	require.True(t, ok)
	require.Equal(t, []string{"yes"}, s.sentinel["tls-replication"])

	// The systemd unit starts Redis with the installed config.
	unit, err := os.ReadFile("systemd/privateassistant-redis.service")
	require.NoError(t, err)
	require.Contains(t, string(unit), "ExecStart=/usr/bin/redis-server /etc/privateassistant/redis.conf")
	unit, err = os.ReadFile("systemd/privateassistant-agent.service")
	require.NoError(t, err)
	require.Contains(t, string(unit), "EnvironmentFile=/etc/privateassistant/agent.env")
}

// envNames are the variables the code reads: envconfig tags and os.Getenv/LookupEnv
// literals in every non-test Go file of the module.
func envNames(t *testing.T) map[string]bool {
	t.Helper()
	re := regexp.MustCompile(`envconfig:"([A-Z0-9_]+)"|(?:Getenv|LookupEnv)\("([A-Z0-9_]+)"\)`)
	out := map[string]bool{}
	require.NoError(t, filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && p != ".." || d.Name() == "node_modules" || d.Name() == "build") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			out[m[1]+m[2]] = true
		}
		return nil
	}))
	return out
}

// tags are the envconfig variables of a settings struct (embedded structs included).
func tags(typ reflect.Type) map[string]bool {
	out := map[string]bool{}
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			for k := range tags(f.Type) {
				out[k] = true
			}
		}
		if v := f.Tag.Get("envconfig"); v != "" {
			out[v] = true
		}
	}
	return out
}

// TestEnvironmentVariablesAgreeWithTheCode: every variable the examples set is one the
// code reads; every setting of the agent and the functions is documented (Appwrite
// provides the APPWRITE_FUNCTION_* ones); agent.env.example sets only agent settings
// and the secrets the GPU file and harnesses name; values both files hold agree.
func TestEnvironmentVariablesAgreeWithTheCode(t *testing.T) {
	t.Parallel()
	s := load(t)
	code := envNames(t)
	var unread, undocumented []string
	for k := range s.env {
		if !code[k] {
			unread = append(unread, k)
		}
	}
	require.Empty(t, unread, ".env.example sets variables no code reads")
	agent, fn := tags(reflect.TypeOf(daemon.Settings{})), tags(reflect.TypeOf(service.Config{}))
	for k := range agent {
		if _, ok := s.env[k]; !ok {
			undocumented = append(undocumented, k)
		}
	}
	for k := range fn {
		if _, ok := s.env[k]; !ok && !strings.HasPrefix(k, "APPWRITE_FUNCTION_") {
			undocumented = append(undocumented, k)
		}
	}
	sort.Strings(undocumented)
	require.Empty(t, undocumented, "settings of the agent or the functions missing from .env.example")
	named := map[string]bool{}
	for _, d := range s.gpu.Devices {
		named[d.Backend.APIKeyEnv] = true
		if d.Immich != nil {
			named[d.Immich.APIKeyEnv] = true
		}
	}
	for _, h := range s.boot.Harnesses {
		named[keyref.Parse(h.KeyRef).Name] = true
	}
	for k, v := range s.agentEnv {
		require.True(t, agent[k] || named[k], "agent.env.example sets %s: neither an agent setting nor a key the GPU file or a harness names", k)
		if ev, ok := s.env[k]; ok && v != "" && ev != "" && !strings.HasPrefix(k, "PA_REDIS_") && !strings.HasPrefix(k, "APPWRITE_") && k != "PA_AGENT_OPS_ADDR" {
			require.Equal(t, ev, v, "%s differs between .env.example and agent.env.example", k)
		}
	}
}

// TestExamplesParseAsSettings: the agent's settings read from deploy/agent.env.example,
// and the functions' from .env.example (as Appwrite variables, Appwrite's own added),
// pass their Validate once the secrets are filled in.
func TestExamplesParseAsSettings(t *testing.T) {
	s := load(t)
	setAll := func(t *testing.T, env map[string]string) {
		for k, v := range env {
			if v == "" && (strings.Contains(k, "KEY") || strings.Contains(k, "PASSWORD")) && !strings.HasSuffix(k, "_REF") {
				v = "example-secret-0123456789"
			}
			t.Setenv(k, v)
		}
	}
	t.Run("agent", func(t *testing.T) {
		setAll(t, s.agentEnv)
		var a daemon.Settings
		require.NoError(t, envconfig.Process("", &a))
		require.NoError(t, a.Validate())
		require.Equal(t, "pa-agent", a.RedisUsername)
		require.True(t, a.TLS)
	})
	t.Run("functions", func(t *testing.T) {
		env := map[string]string{}
		for k, v := range s.env {
			if strings.HasPrefix(k, "PA_") && !strings.HasPrefix(k, "PA_AGENT_") {
				env[k] = v
			}
		}
		env["PA_REDIS_PASSWORD_REF"] = "" // the functions give the password itself
		env["APPWRITE_FUNCTION_API_ENDPOINT"], env["APPWRITE_FUNCTION_PROJECT_ID"] = "https://appwrite.example.com/v1", "p"
		setAll(t, env)
		c, err := service.ConfigFromEnv()
		require.NoError(t, err)
		require.Equal(t, "pa-functions", c.RedisUsername)
		require.True(t, c.TLS)
	})
}

// apiRoutes are the method+path patterns each function registers (its route table).
func apiRoutes(t *testing.T) map[string][]string {
	t.Helper()
	svc, err := service.New(service.Config{Endpoint: "http://127.0.0.1:1/v1", ProjectID: "p", RedisAddr: "127.0.0.1:1",
		LongPollMax: 25 * time.Second, AdmitRate: 1}, nil)
	require.NoError(t, err)
	defer svc.Close()
	out := map[string][]string{}
	for _, f := range service.Functions {
		api, err := svc.API(f.Name)
		require.NoError(t, err)
		for _, r := range api.Routes() {
			if r.Route.Scheduled {
				continue // Appwrite's scheduler calls it inside Appwrite; no proxy routes it
			}
			_, p, _ := strings.Cut(r.Pattern, " ")
			out[f.Name] = append(out[f.Name], regexp.MustCompile(`\{[^}]+\}`).ReplaceAllString(p, "x1"))
		}
	}
	return out
}

// caddyUpstream says which function domain the Caddyfile sends path to ("" for the
// static web chat, "404" for a refusal).
func caddyUpstream(t *testing.T, conf, path string) string {
	t.Helper()
	matchers := map[string][]string{}
	type handle struct {
		paths  []string
		target string
	}
	var handles []handle
	var cur *handle
	depth := 0
lines:
	for _, raw := range strings.Split(conf, "\n") {
		line := strings.TrimSpace(raw)
		if i := strings.Index(line, " #"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 0 || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(f[0], "@") && len(f) > 2 && f[1] == "path":
			matchers[f[0]] = f[2:]
		case f[0] == "handle" && depth == 1:
			h := handle{}
			if len(f) == 3 && strings.HasPrefix(f[1], "@") {
				h.paths = matchers[f[1]]
				require.NotEmpty(t, h.paths, "matcher %s is defined before it is used", f[1])
			} else if len(f) == 3 {
				h.paths = []string{f[1]}
			}
			handles = append(handles, h)
			cur = &handles[len(handles)-1]
		case cur != nil && f[0] == "reverse_proxy" && cur.target == "":
			u, err := url.Parse(f[1])
			require.NoError(t, err)
			cur.target = u.Host
		case cur != nil && f[0] == "header_up" && f[1] == "Host":
			require.Equal(t, cur.target, f[2], "Host header matches the upstream")
		case cur != nil && f[0] == "respond":
			cur.target = f[1]
		case cur != nil && f[0] == "file_server":
			cur.target = ""
		}
		depth += strings.Count(line, "{") - strings.Count(line, "}")
		if depth <= 1 {
			cur = nil
		}
		if depth == 0 && len(handles) > 0 {
			break lines // only the chat site
		}
	}
	match := func(p, pattern string) bool {
		if pre, ok := strings.CutSuffix(pattern, "*"); ok {
			return strings.HasPrefix(p, pre)
		}
		return p == pattern
	}
	// Caddy sorts handles by path specificity; the shipped ones must be disjoint apart
	// from the /api/* fallback and the catch-all, so order cannot matter.
	var hits []handle
	var fallback *handle
	for i, h := range handles {
		for _, pat := range h.paths {
			if match(path, pat) {
				if pat == "/api/*" {
					fallback = &handles[i]
				} else {
					hits = append(hits, h)
				}
				break
			}
		}
		if h.paths == nil && fallback == nil && !strings.HasPrefix(path, "/api/") {
			fallback = &handles[i]
		}
	}
	require.LessOrEqual(t, len(hits), 1, "Caddy: %s matches more than one handle", path)
	if len(hits) == 1 {
		return hits[0].target
	}
	require.NotNil(t, fallback, "Caddy: %s matches no handle", path)
	return fallback.target
}

// nginxUpstream says which function domain nginx's map sends path to ("" for none).
func nginxUpstream(t *testing.T, conf, path string) string {
	t.Helper()
	re := regexp.MustCompile(`(?s)map \$uri \$pa_function \{(.*?)\n\}`)
	m := re.FindStringSubmatch(conf)
	require.NotNil(t, m, "nginx: the $pa_function map")
	def := ""
	for _, line := range strings.Split(m[1], "\n") {
		f := strings.Fields(strings.TrimSuffix(strings.TrimSpace(line), ";"))
		if len(f) != 2 {
			continue
		}
		if f[0] == "default" {
			def = strings.Trim(f[1], `"`)
			continue
		}
		if regexp.MustCompile(strings.TrimPrefix(f[0], "~")).MatchString(path) {
			return f[1]
		}
	}
	return def
}

// TestProxiesRouteEveryFunctionPath: each path every function registers reaches that
// function's domain through both proxy examples, and an /api path no function serves is
// refused rather than answered with the web chat.
func TestProxiesRouteEveryFunctionPath(t *testing.T) {
	t.Parallel()
	caddy, err := os.ReadFile("proxy/Caddyfile")
	require.NoError(t, err)
	nginx, err := os.ReadFile("proxy/nginx.conf")
	require.NoError(t, err)
	routes := apiRoutes(t)
	require.Len(t, routes, len(service.Functions))
	for fn, paths := range routes {
		require.NotEmpty(t, paths, fn)
		want := fn + ".functions.example.com"
		for _, p := range paths {
			require.Equal(t, want, caddyUpstream(t, string(caddy), p), "Caddy: %s", p)
			require.Equal(t, want, nginxUpstream(t, string(nginx), p), "nginx: %s", p)
		}
	}
	for _, p := range []string{"/api/unknown", "/api/mem", "/api/systemd"} {
		require.Equal(t, "404", caddyUpstream(t, string(caddy), p), "Caddy: %s", p)
		require.Equal(t, "", nginxUpstream(t, string(nginx), p), "nginx: %s", p)
	}
	require.Contains(t, string(nginx), `if ($pa_function = "") { return 404; }`)
	require.Equal(t, "", caddyUpstream(t, string(caddy), "/index.html"), "the web chat")
}

// streamRoutes are the paths the stream service registers ({params} filled in).
func streamRoutes(t *testing.T) []string {
	t.Helper()
	svc, err := stream.New(stream.Config{Endpoint: "http://127.0.0.1:1/v1", ProjectID: "p", APIKey: "k", RedisAddr: "127.0.0.1:1",
		Heartbeat: 15 * time.Second, WriteTimeout: time.Second, MaxPerUser: 1}, nil, nil)
	require.NoError(t, err)
	defer svc.Stop()
	var out []string
	for _, r := range svc.Routes() {
		_, p, _ := strings.Cut(r.Pattern, " ")
		require.True(t, strings.HasPrefix(p, stream.Prefix), "%s is under %s", p, stream.Prefix)
		out = append(out, regexp.MustCompile(`\{[^}]+\}`).ReplaceAllString(p, "x1"))
	}
	require.NotEmpty(t, out)
	return out
}

// TestProxiesRouteTheStreamService: every path the stream service registers reaches
// PA_STREAM_ADDR through both proxy examples, unbuffered and uncompressed, with a read
// timeout above the heartbeat; the functions' paths do not.
func TestProxiesRouteTheStreamService(t *testing.T) {
	t.Parallel()
	env := readEnvFile(t, "stream.env.example")
	upstream := env["PA_STREAM_ADDR"]
	require.NotEmpty(t, upstream)
	f, ok := reflect.TypeOf(stream.Config{}).FieldByName("Heartbeat")
	require.True(t, ok)
	heartbeat, err := time.ParseDuration(f.Tag.Get("default"))
	require.NoError(t, err)
	b, err := os.ReadFile("proxy/Caddyfile")
	require.NoError(t, err)
	caddy := string(b)
	b, err = os.ReadFile("proxy/nginx.conf")
	require.NoError(t, err)
	nginx := string(b)
	timeout := func(block, directive string) time.Duration {
		m := regexp.MustCompile(directive + `\s+(\d+[a-z]+)`).FindStringSubmatch(block)
		require.NotNil(t, m, "%s in %s", directive, block)
		d, err := time.ParseDuration(m[1])
		require.NoError(t, err)
		return d
	}

	// Caddy: the handle block, flushed at once, not compressed.
	cm := regexp.MustCompile(`(?s)\n\thandle /stream/\* \{(.*?)\n\t\}`).FindStringSubmatch(caddy)
	require.NotNil(t, cm, "Caddy: handle /stream/*")
	require.Contains(t, cm[1], "flush_interval -1")
	require.Greater(t, timeout(cm[1], "read_timeout"), 2*heartbeat)
	require.Contains(t, caddy, "@compressible not path /stream/*")
	require.Regexp(t, `\n\tencode @compressible `, caddy, "Caddy compresses nothing under /stream/")
	// nginx: the longest matching prefix location.
	locs := regexp.MustCompile(`(?s)\n    location (\S+) \{(.*?)\n    \}`).FindAllStringSubmatch(nginx, -1)
	nginxLocation := func(path string) (string, string) {
		best, body := "", ""
		for _, l := range locs {
			if strings.HasPrefix(path, l[1]) && len(l[1]) > len(best) {
				best, body = l[1], l[2]
			}
		}
		return best, body
	}
	for _, p := range streamRoutes(t) {
		require.Equal(t, upstream, caddyUpstream(t, caddy, p), "Caddy: %s", p)
		loc, body := nginxLocation(p)
		require.Equal(t, stream.Prefix, loc, "nginx: %s", p)
		require.Contains(t, body, "proxy_pass http://"+upstream+";", "nginx: %s", p)
		require.Contains(t, body, "proxy_buffering off;")
		require.Contains(t, body, "gzip off;")
		require.Greater(t, timeout(body, "proxy_read_timeout"), 2*heartbeat)
		require.Equal(t, "", nginxUpstream(t, nginx, p), "nginx: no function serves %s", p)
	}
	for fn, paths := range apiRoutes(t) {
		for _, p := range paths {
			require.NotEqual(t, upstream, caddyUpstream(t, caddy, p), "%s: %s", fn, p)
			loc, _ := nginxLocation(p)
			require.Equal(t, "/api/", loc, "%s: %s", fn, p)
		}
	}
}

// TestStreamEnvExampleIsTheServiceSettings: deploy/stream.env.example sets exactly the
// stream service's settings, and they parse and validate once the secrets are filled in.
func TestStreamEnvExampleIsTheServiceSettings(t *testing.T) {
	env := readEnvFile(t, "stream.env.example")
	want := tags(reflect.TypeOf(stream.Config{}))
	for k := range env {
		require.True(t, want[k], "stream.env.example sets %s, which the stream service does not read", k)
	}
	for k := range want {
		if strings.HasPrefix(k, "PA_STREAM_") {
			_, ok := env[k]
			require.True(t, ok, "stream.env.example documents %s", k)
		}
	}
	for k, v := range env {
		if v == "" && strings.HasSuffix(k, "_KEY") {
			v = "example-secret"
		}
		if k == "PA_STREAM_APPWRITE_PROJECT_ID" && v == "" {
			v = "p"
		}
		t.Setenv(k, v)
	}
	var c stream.Config
	require.NoError(t, envconfig.Process("", &c))
	require.NoError(t, c.Validate())
	require.Equal(t, "pa-stream", c.RedisUsername)
	require.True(t, c.TLS)
	require.Contains(t, strings.Join(shippedACL(t), "\n"), "user pa-stream ", "its Redis user is in the shipped ACL")
}
