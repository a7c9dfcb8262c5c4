package validator

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Gateway is what a Hermes profile's config is checked against: the agent's inference
// gateway as Hermes calls it and the route aliases it serves.
type Gateway struct {
	// URL is the gateway's base URL as Hermes names it (http://127.0.0.1:8091/v1).
	URL string
	// Aliases are the route aliases (an enabled route's alias is a model the gateway serves).
	Aliases []string
	// ApprovalRoles are the roles bound to the profile whose tool policy allows a tool
	// Hermes guards with an approval (runconfig.ToolPolicy.NeedsApprovals): the profile's
	// approval settings must ask the user for them.
	ApprovalRoles []string
	// ExecuteCodeRoles are the roles bound to the profile whose policy allows execute_code,
	// which Hermes's API server never asks about (approvalReasons).
	ExecuteCodeRoles []string
}

// MCPServer is the agent's MCP job server's name in the profile (mcp_servers.pa):
// Hermes registers its tools as the toolset "mcp-pa", with the alias "pa".
const MCPServer = "pa"

// ErrProfileConfig: the profile's config lets inference leave the gateway, or offers the
// MCP job tools behind Hermes's tool_search (its Error names every reason).
var ErrProfileConfig = errors.New("hermes profile config refused")

// ConfigError lists what a Hermes profile's config does wrong.
type ConfigError struct{ Reasons []string }

func (e *ConfigError) Error() string { return strings.Join(e.Reasons, "; ") }
func (e *ConfigError) Unwrap() error { return ErrProfileConfig }

// hermesProfile is the part of Hermes 0.22.2's config.yaml that decides where inference
// goes (hermes_cli/config_defaults.py; tools/delegate_tool_config.py resolves a child's
// endpoint from the delegation section).
type hermesProfile struct {
	Model             any              `yaml:"model"` // a mapping, or a bare model name
	FallbackProviders []any            `yaml:"fallback_providers"`
	Delegation        map[string]any   `yaml:"delegation"`
	Auxiliary         map[string]any   `yaml:"auxiliary"`
	PlatformToolsets  map[string][]any `yaml:"platform_toolsets"`
	MCPServers        map[string]any   `yaml:"mcp_servers"`
	Tools             struct {
		ToolSearch any `yaml:"tool_search"` // a mapping {enabled: auto|on|off} or a legacy bool
	} `yaml:"tools"`
}

var envRef = regexp.MustCompile(`\$\{([^}]+)\}`)

// expand resolves ${VAR} and ${env:VAR} as Hermes does (hermes_cli/config.py
// _expand_env_vars), from the profile's .env; ok is false when a variable is unknown.
func expand(s string, env map[string]string) (string, bool) {
	ok := true
	out := envRef.ReplaceAllStringFunc(s, func(m string) string {
		name := strings.TrimPrefix(envRef.FindStringSubmatch(m)[1], "env:")
		v, found := env[name]
		if !found {
			ok = false
		}
		return v
	})
	return out, ok
}

func str(v any) string {
	switch t := v.(type) {
	case nil:
		return ""
	case string:
		return strings.TrimSpace(t)
	default:
		return strings.TrimSpace(fmt.Sprint(t))
	}
}

// truthy reports whether Hermes reads v as true (utils.is_truthy_value: a bool, or 1, true,
// yes, on in any case).
func truthy(v any) bool {
	if b, ok := v.(bool); ok {
		return b
	}
	switch strings.ToLower(str(v)) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// sameEndpoint reports whether two base URLs name the same endpoint (scheme, host with
// localhost as 127.0.0.1, port, path without a trailing slash).
func sameEndpoint(a, b string) bool {
	norm := func(s string) string {
		u, err := url.Parse(strings.TrimSpace(s))
		if err != nil || u.Host == "" {
			return "\x00" + s
		}
		host, port := u.Hostname(), u.Port()
		if strings.EqualFold(host, "localhost") {
			host = "127.0.0.1"
		}
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[strings.ToLower(u.Scheme)]
		}
		return strings.ToLower(u.Scheme) + "://" + strings.ToLower(net.JoinHostPort(host, port)) + strings.TrimRight(u.Path, "/")
	}
	return norm(a) == norm(b)
}

// offRaw reports whether a tool_search setting is "off" as Hermes reads it
// (tools/tool_search.py: a legacy bool false, or enabled off/false/no/0; PyYAML reads a
// bare off as false).
func offRaw(v any) bool {
	switch t := v.(type) {
	case bool:
		return !t
	case map[string]any:
		e, ok := t["enabled"]
		if !ok {
			return false // the default is auto
		}
		if b, isBool := e.(bool); isBool {
			return !b
		}
		return slices.Contains([]string{"off", "false", "no", "0"}, strings.ToLower(str(e)))
	}
	return false // absent: auto
}

// OffersJobTools reports whether the profile offers the MCP job tools (the toolset "pa"
// or "mcp-pa" on a platform, or in the toolsets Hermes reported).
func OffersJobTools(config []byte, reported map[string][]string) (bool, error) {
	var p hermesProfile
	if err := yaml.Unmarshal(config, &p); err != nil {
		return false, fmt.Errorf("read the Hermes config: %w", err)
	}
	return p.offersPA(reported), nil
}

func (p *hermesProfile) offersPA(reported map[string][]string) bool {
	names := []string{MCPServer, "mcp-" + MCPServer}
	for _, ts := range p.PlatformToolsets {
		for _, t := range ts {
			if slices.Contains(names, str(t)) {
				return true
			}
		}
	}
	for name := range reported {
		if slices.Contains(names, name) {
			return true
		}
	}
	return false
}

// CheckHermesConfig checks a Hermes profile's config.yaml (env: its .env, for ${VAR}
// references; reported: the toolsets the probe read, may be nil) against the gateway:
//
//   - the main model (which a child inherits when delegation pins no endpoint) is the
//     custom provider at the gateway, its default a route alias, with no fallback
//     provider;
//   - native delegation (delegate_task) stays on the gateway: delegation.provider empty
//     or custom (a named provider resolves its own endpoint and credentials),
//     delegation.base_url empty or the gateway, api_mode chat completions, the model empty
//     (the parent's route alias) or a route alias, no fallback providers;
//   - every auxiliary task (compression, title, vision, approval, review, …) is left at
//     provider auto with no base_url or model of its own: only then does Hermes send the
//     run's tagged model on it;
//   - a profile offering the MCP job tools (pa) turns tools.tool_search off: on, Hermes
//     hides MCP tools behind its tool_call bridge and the gateway could not match a call
//     to its caller.
//
// The error is a *ConfigError naming every reason.
func CheckHermesConfig(config []byte, env map[string]string, gw Gateway, reported map[string][]string) error {
	var p hermesProfile
	if err := yaml.Unmarshal(config, &p); err != nil {
		return &ConfigError{Reasons: []string{"the Hermes config is not valid YAML: " + err.Error()}}
	}
	var why []string
	bad := func(format string, a ...any) { why = append(why, fmt.Sprintf(format, a...)) }
	alias := func(field, v string) {
		if v != "" && !slices.Contains(gw.Aliases, v) {
			bad("%s %q is not a route alias (%s)", field, v, strings.Join(gw.Aliases, ", "))
		}
	}
	endpoint := func(field, raw string) {
		v, ok := expand(raw, env)
		switch {
		case !ok:
			bad("%s %q names a variable the profile's .env does not set", field, raw)
		case !sameEndpoint(v, gw.URL):
			bad("%s %q is not the agent's gateway %s", field, raw, gw.URL) // raw: never a value from .env
		}
	}
	resolved := func(raw string) string { v, _ := expand(raw, env); return v }

	// The main model.
	model, _ := p.Model.(map[string]any)
	if model == nil {
		bad("model must be a mapping naming the gateway (provider custom, base_url %s)", gw.URL)
	} else {
		if prov := resolved(str(model["provider"])); prov != "custom" {
			bad("model.provider %q must be custom (the agent's gateway)", prov)
		}
		endpoint("model.base_url", str(model["base_url"]))
		alias("model.default", resolved(str(model["default"])))
	}
	if len(p.FallbackProviders) > 0 {
		bad("fallback_providers must be empty: a fallback provider is not the gateway")
	}

	// Native delegation (delegate_task).
	d := p.Delegation
	if prov := resolved(str(d["provider"])); prov != "" && prov != "custom" {
		bad("delegation.provider %q routes children to a provider of its own; leave it empty or custom", prov)
	}
	if base := str(d["base_url"]); base != "" {
		endpoint("delegation.base_url", base)
	}
	if mode := strings.ToLower(resolved(str(d["api_mode"]))); mode != "" && mode != "chat_completions" {
		bad("delegation.api_mode %q: the gateway serves chat completions", mode)
	}
	alias("delegation.model", resolved(str(d["model"])))
	if fb, ok := d["fallback_providers"].([]any); ok && len(fb) > 0 {
		bad("delegation.fallback_providers must be empty: a child's fallback is not the gateway")
	} else if d["fallback_providers"] != nil && !ok {
		bad("delegation.fallback_providers must be an empty list")
	}
	for _, k := range []string{"command", "acp_command"} {
		if str(d[k]) != "" {
			bad("delegation.%s runs children outside the gateway", k)
		}
	}

	// Auxiliary models (summarization, vision, the approval classifier, /review, …).
	tasks := make([]string, 0, len(p.Auxiliary))
	for k := range p.Auxiliary {
		tasks = append(tasks, k)
	}
	sort.Strings(tasks)
	for _, task := range tasks {
		a, ok := p.Auxiliary[task].(map[string]any)
		if !ok {
			continue // a knob, not a task
		}
		// Only "auto" carries the run: Hermes sends the run's tagged model
		// ("<alias>@<run>") on an auxiliary call only when the task inherits the turn's main
		// runtime (agent/auxiliary_client.py _resolve_auto_route). A pinned provider,
		// endpoint or model (even custom at the gateway with a route alias) sends a model
		// that names no run, which the gateway refuses (403 run_binding_required).
		if prov := strings.ToLower(resolved(str(a["provider"]))); prov != "" && prov != "auto" {
			bad("auxiliary.%s.provider %q: leave it auto, the only setting that sends the run's model", task, prov)
		}
		if base := str(a["base_url"]); base != "" {
			bad("auxiliary.%s.base_url %q: leave it empty, a pinned endpoint sends a model that names no run", task, base)
		}
		if m := resolved(str(a["model"])); m != "" && !strings.EqualFold(m, "auto") {
			bad("auxiliary.%s.model %q: leave it empty, a pinned model names no run", task, str(a["model"])) // raw: never a value from .env
		}
		if truthy(a["prefer_fast_model"]) {
			bad("auxiliary.%s.prefer_fast_model: a fast model from the gateway's catalog names no run", task)
		}
	}

	// Cloud providers and fallbacks of any kind: nothing but the gateway.
	var raw map[string]any
	_ = yaml.Unmarshal(config, &raw)
	why = append(why, cloudAndFallbacks(raw, env, gw)...)
	why = append(why, approvalReasons(raw, gw, offersCodeExecution(&p, reported))...)
	why = append(why, LocalOnlyReasons(raw)...)

	if p.offersPA(reported) && !offRaw(p.Tools.ToolSearch) {
		bad("the profile offers the MCP job tools (%s) but tools.tool_search is not off: Hermes would hide them behind its tool_call bridge", MCPServer)
	}
	if len(why) > 0 {
		return &ConfigError{Reasons: why}
	}
	return nil
}

// ReadEnvFile reads a Hermes .env (NAME=value lines; # comments; optional quotes). A
// missing file is an empty environment.
func ReadEnvFile(path string) (map[string]string, error) {
	out := map[string]string{}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		out[strings.TrimSpace(k)] = v
	}
	return out, sc.Err()
}

// CheckHermesConfigFile checks the config.yaml at path with the .env beside it.
func CheckHermesConfigFile(path string, gw Gateway, reported map[string][]string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return &ConfigError{Reasons: []string{fmt.Sprintf("the agent cannot read the Hermes profile's config %s: %v", path, err)}}
	}
	env, err := ReadEnvFile(filepath.Join(filepath.Dir(path), ".env"))
	if err != nil {
		return &ConfigError{Reasons: []string{fmt.Sprintf("the agent cannot read the Hermes profile's .env: %v", err)}}
	}
	return CheckHermesConfig(b, env, gw, reported)
}
