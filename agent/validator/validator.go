// Package validator validates harness profiles where their keys are (issue #11). The
// admin function cannot read a file: key reference (it names a file on the agent's host),
// and an env: reference names a variable of the agent's environment, so POST
// /api/harnesses/{id}/validate of a Hermes profile only records the request
// (validationRequestedAt on the revision, an audit entry, 202). The agent's Validator
// polls for revisions with a pending request every few seconds, resolves each key with
// keyref, probes the harness (settings.ProbeHarness: /health for the version,
// /v1/capabilities for durable runs idempotency, run events, stop and approval,
// /v1/toolsets), reads the installed build on this host (Build: the commit, or why it is
// unknown) and stores the result through settings.Admin.CompleteValidation — the same
// code the function uses for a direct profile — which applies the tool-policy verdict,
// writes verified, verifiedAt, hermesVersion, hermesCommit and capabilities, clears the
// request and audits it.
//
// An agent that serves the inference gateway (GatewayURL) also reads the Hermes
// profile's config.yaml (HermesConfig, PA_AGENT_HERMES_CONFIG: Hermes runs beside the
// agent) and refuses a profile whose inference can leave the gateway: the main model,
// native delegation (delegate_task's delegation.* settings), a fallback provider or an
// auxiliary model pointing anywhere but the gateway, a child model that is not a route
// alias, the MCP job tools (pa) offered behind Hermes's tool_search, a cloud provider or
// fallback of any kind, an outbound call no role asked for (LocalOnly: the model catalog,
// update checks, lazy installs, telemetry), or approval settings that would let a guarded
// call of a role bound to the profile through or deny it without asking
// (CheckHermesConfig, profile.go and localonly.go). Hermes's API does not expose its config, so an agent
// with a gateway but no readable config leaves the profile unverified (fail closed).
//
// With member homes (MemberHermes) the probe reaches a Hermes started from the profile
// template exactly as a member's (agent/homes Probe), since that is what runs use.
//
// Several agents may run a Validator: each probes with its own keys and the last result
// stored wins; a request made while a probe was in flight stays pending for the next
// round.
package validator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"time"

	"privateassistant/hermes"
	"privateassistant/internal/startstop"
	"privateassistant/keyref"
	"privateassistant/runconfig"
	"privateassistant/schema"
	"privateassistant/settings"
)

// DefaultEvery is how often pending validation requests are looked for.
const DefaultEvery = 3 * time.Second

// Validator is a startstop.Service.
type Validator struct {
	Store   *schema.Store
	HTTP    *http.Client  // nil: a client with a 10 s timeout
	Every   time.Duration // 0: DefaultEvery
	AgentID string        // recorded as the audit entry's actor ("agent:<id>")
	Log     *slog.Logger

	// GatewayURL names the agent's inference gateway as Hermes calls it
	// (http://127.0.0.1:8091/v1); nil: no gateway, the profile's config is not checked.
	GatewayURL func() string
	// HermesConfig is the Hermes profile's config.yaml on this host (its .env beside it
	// resolves ${VAR}); required with GatewayURL.
	HermesConfig string
	// Build reads the installed Hermes's build on this host for the version the server
	// reports (hermes.ReadBuild); nil: the commit is recorded as unknown.
	Build func(version string) hermes.Build
	// MemberHermes, when set (the agent gives every member a Hermes of their own,
	// agent/homes), is what a Hermes profile's probe reaches in place of its baseUrl: a
	// Hermes started from the profile template as every member's is (homes.Supervisor.Probe),
	// called with its URL and key. Runs never use the profile's baseUrl then.
	MemberHermes func(ctx context.Context, f func(url, key string) error) error
	// Failing, when set, is told how many live harness revisions' latest validation failed
	// (settings.LiveCheckFailures: the pa_live_harness_check_failing gauge), after every
	// round that stored a result and at least every FailingEvery.
	Failing      func(n int)
	FailingEvery time.Duration // 0: DefaultFailingEvery

	r         startstop.Runner
	failingAt time.Time // when Failing was last told (only the polling loop touches it)
}

// DefaultFailingEvery is how often the live check failures are counted without a result.
const DefaultFailingEvery = 30 * time.Second

var _ startstop.Service = (*Validator)(nil)

// Start polls in the background until Stop.
func (v *Validator) Start(ctx context.Context) error {
	every := v.Every
	if every <= 0 {
		every = DefaultEvery
	}
	log := v.Log
	if log == nil {
		log = slog.Default()
	}
	return v.r.Start(ctx, func(ctx context.Context) {
		startstop.Every(ctx, every, log, "harness validation", v.Once)
	})
}

// Stop ends the loop and waits for it (a probe in flight is cancelled).
func (v *Validator) Stop() { v.r.Stop() }

// Once validates every revision with a pending request.
func (v *Validator) Once(ctx context.Context) error {
	pending, err := settings.PendingValidations(ctx, v.Store)
	if err != nil {
		return fmt.Errorf("list pending validations: %w", err)
	}
	adm := &settings.Admin{Store: v.Store}
	for i := range pending {
		hp := &pending[i]
		pr := v.probe(ctx, hp)
		if ctx.Err() != nil {
			return nil // stopping: the request stays pending
		}
		// The result is stored whole (revision and audit entry) even when Stop comes now.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_, pr, err = adm.CompleteValidation(wctx, "agent:"+v.AgentID, hp, pr)
		cancel()
		if err != nil {
			return fmt.Errorf("store the validation of %s@%d: %w", hp.ProfileID, hp.Revision, err)
		}
		if v.Log != nil {
			v.Log.Info("harness validated", "profile", hp.ProfileID, "revision", hp.Revision, "verified", pr.Verified, "version", pr.Version, "reason", pr.Reason)
		}
	}
	every := v.FailingEvery
	if every <= 0 {
		every = DefaultFailingEvery
	}
	if v.Failing != nil && (len(pending) > 0 || time.Since(v.failingAt) >= every) {
		fs, err := settings.LiveCheckFailures(ctx, v.Store)
		if err != nil {
			return fmt.Errorf("count the live harness check failures: %w", err)
		}
		v.failingAt = time.Now()
		v.Failing(len(fs))
		for _, f := range fs {
			if v.Log != nil {
				v.Log.Warn("the latest check of a live harness revision failed; its roles keep serving", "profile", f.Harness,
					"revision", f.Revision, "roles", f.Roles, "reason", f.Reason)
			}
		}
	}
	return nil
}

// probe resolves hp's key here (env: or file:) and probes the harness with it.
func (v *Validator) probe(ctx context.Context, hp *schema.HarnessProfile) settings.Probe {
	key := ""
	if hp.KeyRef != nil {
		ref := keyref.Parse(*hp.KeyRef)
		k, err := ref.Resolve()
		if err != nil {
			// Never the key, only where it should have been.
			return settings.Probe{Reason: fmt.Sprintf("the agent cannot read the key %s: %v", ref.String(), err)}
		}
		key = k
	}
	hc := v.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	var pr settings.Probe
	if hp.Kind == "hermes" && v.MemberHermes != nil {
		err := v.MemberHermes(ctx, func(url, key string) error {
			at := *hp
			at.BaseURL = url
			pr = settings.ProbeHarness(ctx, hc, &at, key)
			return nil
		})
		if err != nil {
			pr = settings.Probe{Reason: "a member's Hermes made from the profile template did not start: " + err.Error()}
		}
	} else {
		pr = settings.ProbeHarness(ctx, hc, hp, key)
	}
	if hp.Kind == "hermes" && pr.Version != "" {
		b := hermes.Build{Version: pr.Version, CommitUnknown: "the agent does not read this Hermes's installation"}
		if v.Build != nil {
			b = v.Build(pr.Version)
		}
		pr.Commit = b.CommitOrReason()
	}
	if pr.Verified && hp.Kind == "hermes" && v.GatewayURL != nil {
		if err := v.checkConfig(ctx, hp.ProfileID, pr.Capabilities); err != nil {
			pr.Verified, pr.Reason = false, err.Error()
		}
	}
	return pr
}

// checkConfig checks the Hermes profile's config against the gateway, the enabled route
// aliases and the roles bound to the profile that need approvals (capabilities: the
// probe's summary, for the toolsets Hermes reported).
func (v *Validator) checkConfig(ctx context.Context, profileID, capabilities string) error {
	if v.HermesConfig == "" {
		return fmt.Errorf("the agent serves the inference gateway but does not know the Hermes profile's config (PA_AGENT_HERMES_CONFIG), so it cannot check that delegation stays on the gateway")
	}
	routes, err := schema.For[schema.ModelRoute](v.Store, schema.CollModelRoutes).All(ctx, schema.ListQuery{})
	if err != nil {
		return fmt.Errorf("read the route aliases: %w", err)
	}
	gw := Gateway{URL: v.GatewayURL()}
	for _, r := range routes {
		if r.Enabled && !slices.Contains(gw.Aliases, r.Alias) {
			gw.Aliases = append(gw.Aliases, r.Alias)
		}
	}
	if gw.ApprovalRoles, gw.ExecuteCodeRoles, err = approvalRoles(ctx, v.Store, profileID); err != nil {
		return err
	}
	reported, _ := runconfig.ProfileToolsets(&capabilities)
	return CheckHermesConfigFile(v.HermesConfig, gw, reported)
}

// approvalRoles lists the roles bound to profileID whose effective tool policy allows a
// tool Hermes guards with an approval, and those among them allowing execute_code (sorted).
// No settings yet: none.
func approvalRoles(ctx context.Context, st *schema.Store, profileID string) (guarded, execCode []string, err error) {
	s, err := schema.For[schema.Settings](st, schema.CollSettings).Get(ctx, runconfig.SystemSettingsID)
	if errors.Is(err, schema.ErrNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read the roles: %w", err)
	}
	roles := map[string]runconfig.RoleBinding{}
	if s.Roles != nil {
		if err := json.Unmarshal([]byte(*s.Roles), &roles); err != nil {
			return nil, nil, fmt.Errorf("read the roles: %w", err)
		}
	}
	var ceiling []string
	if s.ToolCeiling != nil {
		if err := json.Unmarshal([]byte(*s.ToolCeiling), &ceiling); err != nil {
			return nil, nil, fmt.Errorf("read the tool ceiling: %w", err)
		}
	}
	for name, b := range roles {
		if b.Harness != profileID {
			continue
		}
		p := runconfig.ToolPolicy(runconfig.EffectiveTools(ceiling, b.Tools))
		if p.NeedsApprovals() {
			guarded = append(guarded, name)
		}
		if p.Allows("execute_code") {
			execCode = append(execCode, name)
		}
	}
	sort.Strings(guarded)
	sort.Strings(execCode)
	return guarded, execCode, nil
}
