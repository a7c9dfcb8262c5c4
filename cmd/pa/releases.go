package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
)

// The admin's release commands (issue 33 items 1-3): the candidates and releases, their
// evidence, approving, promoting and rolling back; -json prints the API's answer as is.

// releaseJSON is what the API answers for one release (functions/service ReleaseView).
type releaseJSON struct {
	Seq         int64    `json:"seq"`
	State       string   `json:"state"`
	Live        bool     `json:"live"`
	LiveIn      []string `json:"liveIn"` // the other environments running it
	Fingerprint string   `json:"fingerprint"`
	CreatedBy   string   `json:"createdBy"`
	CreatedAt   string   `json:"createdAt"`
	PromotedAt  *string  `json:"promotedAt"`
	Plan        *struct {
		Changes []struct {
			Field string `json:"field"`
			From  any    `json:"from"`
			To    any    `json:"to"`
		} `json:"changes"`
	} `json:"plan"`
	Evidence *struct {
		Passed    bool     `json:"passed"`
		Waiting   string   `json:"waiting"`
		Problems  []string `json:"problems"`
		Harnesses []struct {
			ID       string `json:"id"`
			Revision int64  `json:"revision"`
			Kind     string `json:"kind"`
			Verified bool   `json:"verified"`
			Version  string `json:"version"`
			Commit   string `json:"commit"`
		} `json:"harnesses"`
		Routes []struct {
			ID            string `json:"id"`
			Revision      int64  `json:"revision"`
			Device        string `json:"device"`
			Model         string `json:"model"`
			ContextBudget int64  `json:"contextBudget"`
			Qualification string `json:"qualification"`
		} `json:"routes"`
		Probes []struct {
			Role   string `json:"role"`
			OK     bool   `json:"ok"`
			Detail string `json:"detail"`
		} `json:"probes"`
		ProbeSkipped string `json:"probeSkipped"`
		At           string `json:"at"`
	} `json:"evidence"`
	Approvals []struct {
		By string `json:"by"`
	} `json:"approvals"`
}

// stateWords says a release's state in words.
func stateWords(r releaseJSON) string {
	s := productionState(r)
	if len(r.LiveIn) > 0 {
		s += " (live in " + strings.Join(r.LiveIn, ", ") + ")"
	}
	return s
}

func productionState(r releaseJSON) string {
	switch {
	case r.Live:
		return "live"
	case r.State == "collecting":
		return "checking"
	case r.State == "ready" && r.PromotedAt != nil:
		return "was live"
	case r.State == "ready":
		return "ready to promote"
	case r.State == "failed":
		return "checks failed"
	}
	return r.State
}

func changeWords(r releaseJSON) string {
	if r.Plan == nil || len(r.Plan.Changes) == 0 {
		if r.Seq == 1 {
			return "first configuration"
		}
		return "no change"
	}
	out := []string{}
	for _, c := range r.Plan.Changes {
		out = append(out, strings.TrimPrefix(c.Field, "roles."))
	}
	return "changes " + strings.Join(out, ", ")
}

func showReleases(w io.Writer, b json.RawMessage) error {
	var l struct {
		Releases []releaseJSON `json:"releases"`
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return err
	}
	if len(l.Releases) == 0 {
		fmt.Fprintln(w, "No configuration yet.")
		return nil
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RELEASE\tSTATE\tWHAT\tBY\tMADE\tAPPROVED BY")
	for _, r := range l.Releases {
		by := []string{}
		for _, a := range r.Approvals {
			by = append(by, a.By)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", r.Seq, stateWords(r), changeWords(r), r.CreatedBy, minute(r.CreatedAt), dash(strings.Join(by, ", ")))
	}
	return tw.Flush()
}

func showRelease(w io.Writer, b json.RawMessage) error {
	var v struct {
		Release releaseJSON `json:"release"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	r := v.Release
	fmt.Fprintf(w, "Release %d: %s (%s by %s, %s)\n", r.Seq, stateWords(r), changeWords(r), r.CreatedBy, minute(r.CreatedAt))
	e := r.Evidence
	if e == nil {
		fmt.Fprintln(w, "Evidence: not collected yet.")
		return nil
	}
	switch {
	case e.Passed:
		fmt.Fprintf(w, "Evidence (%s): passed.\n", minute(e.At))
	case e.Waiting != "":
		fmt.Fprintf(w, "Evidence (%s): waiting: %s.\n", minute(e.At), e.Waiting)
	default:
		fmt.Fprintf(w, "Evidence (%s): failed.\n", minute(e.At))
	}
	for _, p := range e.Problems {
		fmt.Fprintf(w, "  problem: %s\n", p)
	}
	for _, h := range e.Harnesses {
		fmt.Fprintf(w, "  harness %s revision %d (%s): verified %s", h.ID, h.Revision, h.Kind, yesNo(h.Verified))
		if h.Version != "" {
			fmt.Fprintf(w, ", Hermes %s", h.Version)
		}
		if h.Commit != "" {
			fmt.Fprintf(w, " (%s)", h.Commit)
		}
		fmt.Fprintln(w)
	}
	for _, rt := range e.Routes {
		fmt.Fprintf(w, "  route %s revision %d: %s on %s, %d tokens; qualification: %s\n", rt.ID, rt.Revision, rt.Model, rt.Device, rt.ContextBudget, rt.Qualification)
	}
	for _, p := range e.Probes {
		ok := "answered"
		if !p.OK {
			ok = "failed"
		}
		fmt.Fprintf(w, "  probe run for %s: %s (%s)\n", p.Role, ok, p.Detail)
	}
	if e.ProbeSkipped != "" {
		fmt.Fprintf(w, "  no probe run: %s\n", e.ProbeSkipped)
	}
	return nil
}

// releaseAct is approve, promote or revert (the API's rollback) of release N (only
// with -yes); promote and revert take -env (a runtime environment; default production).
func releaseAct(name, action, summary, help string, withEnv bool) *command {
	return &command{name: name, args: "RELEASE", min: 1, max: 1, summary: summary, help: help,
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON, yes := jsonFlag(fs), yesFlag(fs)
			env := new(string)
			if withEnv {
				env = fs.String("env", "", "the runtime `environment` whose live release moves (default production)")
			}
			return func(ctx context.Context, a []string) error {
				n, err := strconv.ParseInt(a[0], 10, 64)
				if err != nil || n < 1 {
					return fail(exitUsage, "admin %s: RELEASE must be a release number (pa admin candidates), not %q", name, a[0])
				}
				where := ""
				if *env != "" {
					where = " in " + *env
				}
				if !*yes {
					fmt.Fprintf(c.errw, "plan (commit with -yes): %s release %d%s\n", name, n, where)
					return c.render(*asJSON, showRelease)(c.call(ctx, "GET", "/api/releases/"+a[0], nil))
				}
				body := map[string]any{}
				if *env != "" {
					body["environment"] = *env
				}
				return c.render(*asJSON, showRelease)(c.call(ctx, "POST", "/api/releases/"+a[0]+"/"+action, body))
			}
		}}
}

var releaseCommands = []*command{
	{name: "candidates", min: 0, max: 0, summary: "list the configuration candidates and releases, newest first",
		help: "Lists each configuration change (a candidate until it is promoted): what it changes, who made it, whether\nits checks passed, who approved it and which one is live. Checks still running are collected first.",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON := jsonFlag(fs)
			return func(ctx context.Context, _ []string) error {
				return c.render(*asJSON, showReleases)(c.call(ctx, "GET", "/api/releases", nil))
			}
		}},
	{name: "evidence", args: "RELEASE", min: 1, max: 1, summary: "check a candidate now and show its evidence",
		help: "Checks candidate RELEASE against the harnesses, routes and GPUs it uses (if its checks are still running)\nand shows the evidence: validation, the Hermes and model versions seen, GPU qualification, probe runs.",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON := jsonFlag(fs)
			return func(ctx context.Context, a []string) error {
				if n, err := strconv.ParseInt(a[0], 10, 64); err != nil || n < 1 {
					return fail(exitUsage, "admin evidence: RELEASE must be a release number (pa admin candidates), not %q", a[0])
				}
				return c.render(*asJSON, showRelease)(c.call(ctx, "POST", "/api/releases/"+a[0]+"/evidence", map[string]any{}))
			}
		}},
	releaseAct("approve", "approve", "approve another admin's candidate",
		"Approves candidate RELEASE (its checks must have passed). With two or more admins, a candidate goes live only\nonce an admin other than its author approved it. Commits only with -yes.", false),
	releaseAct("promote", "promote", "make a candidate live",
		"Makes candidate RELEASE live: its checks must have passed and, with two or more admins, another admin must\nhave approved it (or promote it). Runs already queued keep the configuration they were admitted with.\nWith -env, only that runtime environment (its apps' keys) runs it. Commits only with -yes.", true),
	// pa admin rollback is the functions' rollback (backup.go): this is the configuration's.
	releaseAct("revert", "rollback", "make an earlier configuration release live again (a configuration rollback)",
		"Makes configuration release RELEASE, which was live before, live again after checking it again. Runs\nalready queued keep the configuration they were admitted with. With -env, in that runtime environment only.\nCommits only with -yes. (pa admin rollback rolls the functions back to the previous deployment instead.)", true),
	{name: "follow", args: "ENVIRONMENT", min: 1, max: 1, summary: "make a runtime environment run production's live release again",
		help: "Sends runtime environment ENVIRONMENT (e.g. staging), promoted separately with promote -env, back to\nrunning production's live release, and every later one. Commits only with -yes.",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON, yes := jsonFlag(fs), yesFlag(fs)
			return func(ctx context.Context, a []string) error {
				if !*yes {
					fmt.Fprintf(c.errw, "plan (commit with -yes): environment %s runs production's live release from now on\n", a[0])
					return nil
				}
				return c.render(*asJSON, func(w io.Writer, _ json.RawMessage) error {
					_, err := fmt.Fprintf(w, "Environment %s runs production's live release.\n", a[0])
					return err
				})(c.call(ctx, "POST", "/api/environments/"+url.PathEscape(a[0])+"/follow-production", map[string]any{}))
			}
		}},
}
