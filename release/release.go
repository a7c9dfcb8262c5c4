// Package release records what a release put in place and rolls back to the one before
// (issue 18; deploy/RUNBOOK.md "Upgrade" and "Rollback").
//
// A release manifest (Record, `make release`) names the function deployments that are
// active in Appwrite, the agent build version and the schema version (backup.Schema).
// Manifests are kept in a directory, one file per release, named so that they sort by
// time. Rollback finds the release whose deployments are active now and activates the
// previous release's deployments through Appwrite's Functions API
// (PATCH /v1/functions/{id}/deployment); it prints the agent's step (point the versioned
// install's symlink at the previous build and restart the unit) and never touches the
// schema: schema changes are additive and forward-only, so the previous functions and
// agent run on the newer schema, and a release whose schema has something the current one
// lacks is refused (ErrSchema). Data is not touched either: completed runs stay completed
// and are not replayed.
package release

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/appwrite/sdk-for-go/functions"

	"privateassistant/backup"
)

// FormatVersion of a release manifest.
const FormatVersion = 1

// AgentRoot is where the agent's versioned installs live on a GPU host: one folder per
// build under releases/, and the symlink current pointing at the running one
// (/usr/local/bin/pa-agent links to current/pa-agent).
const AgentRoot = "/opt/privateassistant"

// Errors a caller may classify.
var (
	ErrNoCurrent  = errors.New("release: the active deployments match no release manifest")
	ErrNoPrevious = errors.New("release: there is no earlier release to roll back to")
	ErrSchema     = errors.New("release: the target release's schema has what the current one lacks")
	ErrNotReady   = errors.New("release: a deployment of the target release is not ready")
)

// Manifest is one release.
type Manifest struct {
	Format    int               `json:"format"`
	Version   string            `json:"version"` // the agent build version, which names the release
	CreatedAt string            `json:"createdAt"`
	Agent     Agent             `json:"agent"`
	Schema    backup.SchemaInfo `json:"schema"`
	Functions map[string]string `json:"functions"` // function id → its active deployment id
	File      string            `json:"-"`         // the manifest's file name, once read
}

// Agent is the agent build of a release.
type Agent struct {
	Version string `json:"version"`
	Install string `json:"install"` // AgentRoot/releases/<version>
}

// Record reads the active deployment of each function and writes the release manifest
// into dir. A function without an active deployment is an error.
func Record(fn *functions.Functions, fnIDs []string, agentVersion string, schema backup.SchemaInfo, dir string, now time.Time) (*Manifest, error) {
	if agentVersion == "" || strings.ContainsAny(agentVersion, "/\\ ") {
		return nil, fmt.Errorf("release: the agent version %q must be a non-empty word", agentVersion)
	}
	m := &Manifest{Format: FormatVersion, Version: agentVersion, CreatedAt: now.UTC().Format(time.RFC3339Nano),
		Agent:  Agent{Version: agentVersion, Install: AgentRoot + "/releases/" + agentVersion},
		Schema: schema, Functions: map[string]string{}}
	for _, id := range fnIDs {
		f, err := fn.Get(id)
		if err != nil {
			return nil, fmt.Errorf("release: function %s: %w", id, err)
		}
		if f.DeploymentId == "" {
			return nil, fmt.Errorf("release: function %s has no active deployment", id)
		}
		m.Functions[id] = f.DeploymentId
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	m.File = now.UTC().Format("20060102T150405.000Z") + "-" + agentVersion + ".json"
	if err := os.WriteFile(filepath.Join(dir, m.File), append(b, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	return m, nil
}

// List reads every manifest in dir, oldest first.
func List(dir string) ([]*Manifest, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []*Manifest
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			return nil, fmt.Errorf("release: %w", err)
		}
		var m Manifest
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("release: %s: %w", filepath.Base(n), err)
		}
		if m.Format < 1 || m.Format > FormatVersion {
			return nil, fmt.Errorf("release: %s: format %d (this build reads up to %d)", filepath.Base(n), m.Format, FormatVersion)
		}
		m.File = filepath.Base(n)
		out = append(out, &m)
	}
	return out, nil
}

// Plan is what a rollback does.
type Plan struct {
	From, To *Manifest
}

// Choose finds the release whose deployments are active (the newest such) and the one to
// roll back to: to (a version or a manifest file name) or else the release before it.
func Choose(fn *functions.Functions, releases []*Manifest, to string) (*Plan, error) {
	active := map[string]string{}
	cur := -1
	for i := len(releases) - 1; i >= 0 && cur < 0; i-- {
		match := len(releases[i].Functions) > 0
		for id, dep := range releases[i].Functions {
			if _, ok := active[id]; !ok {
				f, err := fn.Get(id)
				if err != nil {
					return nil, fmt.Errorf("release: function %s: %w", id, err)
				}
				active[id] = f.DeploymentId
			}
			match = match && active[id] == dep
		}
		if match {
			cur = i
		}
	}
	if cur < 0 {
		return nil, ErrNoCurrent
	}
	p := &Plan{From: releases[cur]}
	if to == "" {
		if cur == 0 {
			return nil, ErrNoPrevious
		}
		p.To = releases[cur-1]
		return p, nil
	}
	for i := len(releases) - 1; i >= 0; i-- {
		if releases[i].Version == to || releases[i].File == to {
			p.To = releases[i]
			return p, nil
		}
	}
	return nil, fmt.Errorf("release: no release %q in the manifests", to)
}

// Rollback activates plan.To's deployments (each must exist and be ready, which is
// checked for all before any is activated) and prints each step and the agent's. The
// schema is never changed: current is the schema in place, and a target whose schema
// has something current lacks is refused. With dryRun it only prints.
func Rollback(fn *functions.Functions, plan *Plan, current backup.SchemaInfo, out io.Writer, dryRun bool) error {
	if missing := current.Covers(plan.To.Schema); len(missing) > 0 {
		return fmt.Errorf("%w: %s", ErrSchema, strings.Join(missing, ", "))
	}
	fmt.Fprintf(out, "rollback: from release %s to %s\n", plan.From.Version, plan.To.Version)
	ids := make([]string, 0, len(plan.To.Functions))
	for id := range plan.To.Functions {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		d, err := fn.GetDeployment(id, plan.To.Functions[id])
		if err != nil {
			return fmt.Errorf("release: function %s deployment %s: %w", id, plan.To.Functions[id], err)
		}
		if d.Status != "ready" {
			return fmt.Errorf("%w: function %s deployment %s is %s", ErrNotReady, id, d.Id, d.Status)
		}
	}
	for _, id := range ids {
		dep := plan.To.Functions[id]
		if dryRun {
			fmt.Fprintf(out, "  function %s: would activate deployment %s (now %s)\n", id, dep, plan.From.Functions[id])
			continue
		}
		if _, err := fn.UpdateFunctionDeployment(id, dep); err != nil {
			return fmt.Errorf("release: activate %s deployment %s: %w", id, dep, err)
		}
		fmt.Fprintf(out, "  function %s: deployment %s is active (was %s)\n", id, dep, plan.From.Functions[id])
	}
	fmt.Fprintf(out, "  schema: stays at %s (never downgraded: the schema only grows, and release %s runs on it)\n", current.Version, plan.To.Version)
	fmt.Fprintf(out, "agent: on each GPU host, run the previous build from its versioned install:\n"+
		"  sudo ln -sfn %s %s/current && sudo systemctl restart privateassistant-agent\n"+
		"  (runs in flight finish or resume from their idempotency keys; completed runs are not replayed)\n",
		plan.To.Agent.Install, AgentRoot)
	return nil
}
