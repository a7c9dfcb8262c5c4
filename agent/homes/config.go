package homes

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"privateassistant/internal/dotenv"
)

// memberConfig is a member's config.yaml: the operator's profile template with what
// belongs to the member's sandbox set on top: the API server on loopback at the member's
// port (the key comes from the environment only, never a file), terminal.cwd the
// member's working folder as their Hermes names it, and the run-folder plugin enabled. Everything else (model, gateway,
// approvals, toolsets, delegation, MCP servers) is the template's.
func memberConfig(template []byte, port int) ([]byte, error) {
	cfg := map[string]any{}
	if err := yaml.Unmarshal(template, &cfg); err != nil {
		return nil, fmt.Errorf("hermes profile template: %w", err)
	}
	if cfg == nil {
		cfg = map[string]any{}
	}
	gw := child(cfg, "gateway")
	api := child(gw, "api_server")
	delete(api, "key")
	api["enabled"], api["host"], api["port"] = true, "127.0.0.1", port
	term := child(cfg, "terminal")
	term["cwd"] = filepath.Join(Inside, workDir)
	if _, ok := term["backend"]; !ok {
		term["backend"] = "local" // the sandbox is the confinement
	}
	enablePlugin(cfg) // each run in its own folder (runfolder.go)
	return yaml.Marshal(cfg)
}

// child returns m[key] as a map, creating it (or replacing a non-map) as needed.
func child(m map[string]any, key string) map[string]any {
	if c, ok := m[key].(map[string]any); ok {
		return c
	}
	c := map[string]any{}
	m[key] = c
	return c
}

// memberEnv is a member's .env: the template's .env beside its config.yaml without the
// operator's API_SERVER_* settings (the shared Hermes's inbound key never reaches a
// member's home), and with the member's own gateway key (agent/memberkey) as
// GATEWAY_API_KEY — what config.yaml names as ${GATEWAY_API_KEY} for the model, native
// delegation and the MCP job server — in place of the agent's, wherever the agent's
// appeared. memberKey "" (no gateway): the template's values as they are.
func memberEnv(templatePath, gatewayKey, memberKey string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(filepath.Dir(templatePath), ".env"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	vals, err := dotenv.Parse(string(b))
	if err != nil {
		return nil, fmt.Errorf("hermes profile .env: %w", err)
	}
	if memberKey != "" {
		for k, v := range vals {
			if v == gatewayKey {
				vals[k] = memberKey
			}
		}
		vals["GATEWAY_API_KEY"] = memberKey
	}
	keys := make([]string, 0, len(vals))
	for k := range vals {
		if !strings.HasPrefix(k, "API_SERVER_") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var out strings.Builder
	for _, k := range keys {
		if strings.ContainsAny(vals[k], "\"\n") {
			return nil, fmt.Errorf("hermes profile .env: %s: a value with a quote or newline is not supported", k)
		}
		fmt.Fprintf(&out, "%s=\"%s\"\n", k, vals[k])
	}
	return []byte(out.String()), nil
}
