package validator

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// LocalSetting is one Hermes setting that, left on, makes Hermes call out on its own: no
// role asked for the call.
type LocalSetting struct {
	Path string // dotted config.yaml path
	// Off is the value that turns the call off (false, or 0 for a cadence).
	Off any
	// OnByDefault: Hermes 0.22.2 calls out when the setting is absent, so the profile must
	// set it.
	OnByDefault bool
	What        string // the outbound call
}

// LocalOnly are the settings of Hermes 0.22.2 (hermes_cli/config_defaults.py and the code
// that reads each) that make outbound calls no role asks for. Harness validation refuses
// a profile that leaves any of them on; deploy/hermes/config.yaml and the dev/test profile
// (hermes/hermesreal) turn them all off, and TestNoOutboundCallsDuringAResearchRun runs
// the real Hermes behind a trap proxy to prove it.
var LocalOnly = []LocalSetting{
	{"model_catalog.enabled", false, true, "the gateway refreshes its model catalogs from hermes-agent.nousresearch.com, raw.githubusercontent.com, openrouter.ai and portal.nousresearch.com 30 s after start and every 20 min (gateway/run_watchers.py, hermes_cli/model_catalog.py)"},
	{"updates.check", false, true, "passive version checks against the release channel (hermes_cli/update_cmd.py)"},
	{"plugins.auto_update_check_hours", 0, true, "the gateway's daily plugin update check (gateway/run.py _housekeeping_plugin_update_check)"},
	{"security.allow_lazy_installs", false, true, "missing optional dependencies installed from PyPI on first use (pm/install.py lazy_installs_allowed)"},
	{"telemetry.shared_metrics.enabled", false, false, "aggregate metrics collection"},
	{"telemetry.shared_metrics.send", false, false, "metrics sent to telemetry.nousresearch.com"},
	{"monitoring.gateway_health_export.enabled", false, false, "gateway health exported over OTLP"},
	{"monitoring.export.otlp.enabled", false, false, "OTLP export to an operator endpoint"},
}

// lookup returns the value at a dotted path of a YAML mapping.
func lookup(m map[string]any, path string) (any, bool) {
	var cur any = m
	for _, k := range strings.Split(path, ".") {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = mm[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// isOff reports whether v is the setting's off value as Hermes reads it.
func (ls LocalSetting) isOff(v any) bool {
	if _, cadence := ls.Off.(int); cadence {
		f, err := strconv.ParseFloat(str(v), 64)
		return err == nil && f <= 0
	}
	if b, ok := v.(bool); ok {
		return !b
	}
	switch strings.ToLower(str(v)) {
	case "false", "0", "no", "off":
		return true
	}
	return false
}

// LocalOnlyReasons lists what in a parsed config.yaml lets Hermes call out on its own.
func LocalOnlyReasons(cfg map[string]any) []string {
	var why []string
	for _, ls := range LocalOnly {
		v, set := lookup(cfg, ls.Path)
		switch {
		case !set && ls.OnByDefault:
			why = append(why, fmt.Sprintf("%s is not set to %v: Hermes makes an outbound call no role asked for (%s)", ls.Path, ls.Off, ls.What))
		case set && v != nil && !ls.isOff(v):
			why = append(why, fmt.Sprintf("%s is on: Hermes makes an outbound call no role asked for (%s)", ls.Path, ls.What))
		}
	}
	return why
}

// cloudAndFallbacks refuses every provider, route or fallback that is not the gateway:
// named providers (providers.<name>, the legacy custom_providers list), the API server's
// model_routes, delegation.routes, fallback_model and each auxiliary task's
// fallback_chain (Hermes tries them when the main provider fails: a silent cloud
// fallback).
func cloudAndFallbacks(cfg map[string]any, env map[string]string, gw Gateway) []string {
	var why []string
	endpointOK := func(raw string) bool {
		v, ok := expand(raw, env)
		return ok && sameEndpoint(v, gw.URL)
	}
	route := func(field string, r map[string]any) {
		if prov := strings.ToLower(str(r["provider"])); prov != "" && prov != "custom" {
			why = append(why, fmt.Sprintf("%s.provider %q is a provider of its own, not the agent's gateway", field, str(r["provider"])))
		}
		for _, k := range []string{"base_url", "api"} {
			if b := str(r[k]); b != "" && !endpointOK(b) {
				why = append(why, fmt.Sprintf("%s.%s %q is not the agent's gateway %s", field, k, b, gw.URL))
			}
		}
		if fb, ok := r["fallback_providers"].([]any); ok && len(fb) > 0 {
			why = append(why, fmt.Sprintf("%s.fallback_providers must be empty: a fallback is not the gateway", field))
		}
	}
	named := func(field string, m map[string]any) {
		for _, k := range sortedKeys(m) {
			if r, ok := m[k].(map[string]any); ok {
				route(field+"."+k, r)
				if str(r["base_url"]) == "" && str(r["api"]) == "" {
					why = append(why, fmt.Sprintf("%s.%s names no endpoint: Hermes resolves a provider's own (cloud) endpoint", field, k))
				}
			}
		}
	}
	if m, ok := cfg["providers"].(map[string]any); ok {
		named("providers", m)
	}
	if l, ok := cfg["custom_providers"].([]any); ok {
		for i, e := range l {
			if r, ok := e.(map[string]any); ok {
				route(fmt.Sprintf("custom_providers[%d]", i), r)
			}
		}
	}
	for _, at := range []string{"gateway.api_server", "gateway.platforms.api_server", "platforms.api_server", "platforms.api_server.extra"} {
		if v, ok := lookup(cfg, at+".model_routes"); ok {
			if m, ok := v.(map[string]any); ok && len(m) > 0 {
				for _, k := range sortedKeys(m) {
					if r, ok := m[k].(map[string]any); ok {
						route(at+".model_routes."+k, r)
					}
				}
			}
		}
	}
	if v, ok := lookup(cfg, "delegation.routes"); ok {
		if m, ok := v.(map[string]any); ok {
			for _, k := range sortedKeys(m) {
				if r, ok := m[k].(map[string]any); ok {
					route("delegation.routes."+k, r)
				}
			}
		}
	}
	switch fb := cfg["fallback_model"].(type) {
	case nil:
	case map[string]any:
		if len(fb) > 0 {
			why = append(why, "fallback_model must be absent: Hermes switches to it when the gateway fails")
		}
	case []any:
		if len(fb) > 0 {
			why = append(why, "fallback_model must be absent: Hermes switches to it when the gateway fails")
		}
	default:
		why = append(why, "fallback_model must be absent")
	}
	if aux, ok := cfg["auxiliary"].(map[string]any); ok {
		for _, task := range sortedKeys(aux) {
			if a, ok := aux[task].(map[string]any); ok {
				if fc, ok := a["fallback_chain"].([]any); ok && len(fc) > 0 {
					why = append(why, fmt.Sprintf("auxiliary.%s.fallback_chain must be empty: Hermes tries it when the gateway fails", task))
				}
			}
		}
	}
	return why
}

// approvalReasons refuses approval settings under which a guarded call of a role bound
// to the profile would be denied, or run, without asking the user. Hermes 0.22.2 treats
// the whole api_server platform as unattended (tools/approval_context.py); what that means
// for a run on /v1/runs, seen on the real server (hermes/hermesreal
// TestUnattendedModeOnRealHermes):
//
//   - a dangerous terminal command asks (approval.request) whatever
//     approvals.unattended_mode says: /v1/runs registers an approval notifier;
//   - execute_code never asks: its guard resolves from approvals.unattended_mode first
//     (tools/approval.py check_execute_code_guard), deny by default, so the call is denied
//     at once with no approval.request (upstream bug #98728), and approve runs it unasked.
//
// So refused: approvals.mode off (every guarded call runs unasked) and an approving
// unattended_mode, for any role with guarded tools (ApprovalRoles); and, for a role whose
// policy allows execute_code (ExecuteCodeRoles) on a profile that offers code_execution, any
// unattended_mode (deny, Hermes's default when unset, or approve): on this Hermes such a
// role must not be given execute_code.
func approvalReasons(cfg map[string]any, gw Gateway, offersCode bool) []string {
	var why []string
	if len(gw.ApprovalRoles) > 0 {
		names := strings.Join(gw.ApprovalRoles, ", ")
		if v, ok := lookup(cfg, "approvals.mode"); ok {
			if b, isBool := v.(bool); (isBool && !b) || strings.EqualFold(str(v), "off") {
				why = append(why, fmt.Sprintf("approvals.mode off runs every guarded tool call without asking, but role %s needs approvals", names))
			}
		}
		if v, ok := lookup(cfg, "approvals.unattended_mode"); ok && approving(v) {
			why = append(why, fmt.Sprintf("approvals.unattended_mode %s lets the API server run guarded tool calls (execute_code) without asking, but role %s needs approvals; remove the setting", str(v), names))
		}
	}
	if len(gw.ExecuteCodeRoles) > 0 && offersCode {
		mode := "deny (Hermes's default when unset)"
		if v, ok := lookup(cfg, "approvals.unattended_mode"); ok && v != nil {
			mode = strings.ToLower(str(v))
			if approving(v) {
				mode += ", which runs it unasked"
			}
		}
		why = append(why, fmt.Sprintf("role %s allows execute_code, which this profile offers, but Hermes's API server never asks before execute_code: it resolves it from approvals.unattended_mode %s (a deny comes at once without an approval request: Hermes bug #98728); take execute_code out of the role's tools or code_execution out of platform_toolsets.api_server", strings.Join(gw.ExecuteCodeRoles, ", "), mode))
	}
	return why
}

// approving reports whether Hermes reads an unattended mode as approve
// (tools/approval_context.py _binary_approval_mode: approve, off, allow, yes).
func approving(v any) bool {
	if _, ok := v.(bool); ok {
		return false // PyYAML reads a bare off or yes as a bool; Hermes's "false"/"true" are deny
	}
	switch strings.ToLower(str(v)) {
	case "approve", "off", "allow", "yes":
		return true
	}
	return false
}

// offersCodeExecution reports whether the profile offers execute_code to the API server:
// code_execution in platform_toolsets.api_server or in the toolsets Hermes reported, or no
// platform_toolsets.api_server at all (Hermes's default toolsets).
func offersCodeExecution(p *hermesProfile, reported map[string][]string) bool {
	if _, ok := reported["code_execution"]; ok {
		return true
	}
	ts, ok := p.PlatformToolsets["api_server"]
	if !ok {
		return true
	}
	for _, t := range ts {
		if n := str(t); n == "code_execution" || n == "execute_code" {
			return true
		}
	}
	return false
}

func sortedKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
