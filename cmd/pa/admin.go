package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strconv"
	"strings"
)

// adminCommands are the subcommands of pa admin.
var adminCommands = append([]*command{
	adminGet("harnesses", "list every harness profile revision", "/api/harnesses"),
	adminGet("routes", "list every model route revision", "/api/model-routes"),
	adminGet("audit", "list the configuration audit, newest first", "/api/audit"),
	adminGet("settings", "show which revisions each work role uses", "/api/settings"),
	{name: "harness", args: "PROFILE", min: 1, max: 1, summary: "register a harness profile revision",
		help: "Registers the next revision of harness profile PROFILE. Prints the plan; commits only with -yes.",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON, yes := jsonFlag(fs), yesFlag(fs)
			kind := fs.String("kind", "", "hermes or direct (required)")
			baseURL := fs.String("url", "", "the harness's base `URL` (required)")
			name := fs.String("name", "", "the Hermes profile name")
			keyRef := fs.String("key-ref", "", "where the API key is kept: env:NAME or file:/path (never the key)")
			return func(ctx context.Context, a []string) error {
				switch {
				case *kind != "hermes" && *kind != "direct":
					return fail(exitUsage, "admin harness: -kind must be hermes or direct")
				case *baseURL == "":
					return fail(exitUsage, "admin harness: -url is required")
				}
				return c.commit(ctx, *asJSON, *yes, "POST", "/api/harnesses", map[string]any{"input": map[string]any{"profileId": a[0], "kind": *kind,
					"baseUrl": *baseURL, "profileName": *name, "keyRef": *keyRef}})
			}
		}},
	{name: "route", args: "ROUTE", min: 1, max: 1, summary: "register a model route revision",
		help: "Registers the next revision of model route ROUTE. Prints the plan; commits only with -yes.",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON, yes := jsonFlag(fs), yesFlag(fs)
			alias := fs.String("alias", "", "the model name runs ask the gateway for (required)")
			device := fs.String("device", "", "the GPU device that serves it (required)")
			model := fs.String("model", "", "the backend's model name (required)")
			ctxBudget := fs.Int64("context", 0, "the measured context window in `tokens` (required, > 0)")
			maxOut := fs.Int64("max-output", 0, "the output cap in `tokens` (0: none)")
			return func(ctx context.Context, a []string) error {
				switch {
				case *alias == "" || *device == "" || *model == "":
					return fail(exitUsage, "admin route: -alias, -device and -model are required")
				case *ctxBudget < 1:
					return fail(exitUsage, "admin route: -context must be the measured context window (> 0)")
				case *maxOut < 0:
					return fail(exitUsage, "admin route: -max-output must not be negative")
				}
				return c.commit(ctx, *asJSON, *yes, "POST", "/api/model-routes", map[string]any{"input": map[string]any{"routeId": a[0], "alias": *alias,
					"device": *device, "backendModel": *model, "contextBudget": *ctxBudget, "maxOutput": *maxOut}})
			}
		}},
	{name: "gpu", args: "confirm DEVICE | qualify ROUTE | qualification ROUTE", min: 2, max: 2, summary: "confirm an unknown GPU device is free; qualify a route on its GPU",
		help: "confirm DEVICE: confirms that GPU device DEVICE, in state unknown, is free again (you checked that nothing\n" +
			"holds its memory). Its agent applies it within seconds; a device that is not unknown is left as it is.\n\n" +
			"qualify ROUTE: asks the agent of the route's device to qualify the route's latest revision: it loads the\n" +
			"model at the route's context budget and stresses it (the KV cache filled to the budget, a generation at\n" +
			"the route's maximum output, every slot at once), measures context served, VRAM, speed, temperature and\n" +
			"power, and records pass or fail against the GPU file's limits on a new revision of the route. It queues\n" +
			"like a job: never while a user's job holds the device. A role can switch to the route only after it\n" +
			"passed. Qualify again after any model, driver or cooling change. With -wait, waits for the verdict.\n\n" +
			"qualification ROUTE: shows the route's last qualification and the request in progress.",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON := jsonFlag(fs)
			wait := fs.Duration("wait", 0, "qualify: wait up to this long for the verdict (e.g. 30m), printing its progress")
			return func(ctx context.Context, a []string) error {
				switch a[0] {
				case "confirm":
					if err := checkID("device", a[1]); err != nil {
						return err
					}
					return c.printAs(*asJSON)(c.call(ctx, "POST", apiPath("/api/gpus/{}/confirm", a[1]), map[string]any{}))
				case "qualify", "qualification":
					if err := checkID("route", a[1]); err != nil {
						return err
					}
				default:
					return fail(exitUsage, "admin gpu: the actions are confirm, qualify and qualification, not %q", a[0])
				}
				if a[0] == "qualification" {
					return c.printAs(*asJSON)(c.call(ctx, "GET", apiPath("/api/model-routes/{}/qualification", a[1]), nil))
				}
				b, err := c.call(ctx, "POST", apiPath("/api/model-routes/{}/qualify", a[1]), map[string]any{})
				if err != nil || *wait <= 0 {
					return c.print(*asJSON, b, err)
				}
				if !*asJSON {
					if err := c.print(false, b, nil); err != nil {
						return err
					}
				}
				return c.waitQualification(ctx, a[1], *wait, *asJSON)
			}
		}},
	{name: "validate", args: "PROFILE REVISION", min: 2, max: 2, summary: "probe a harness revision and record the result",
		help: "Probes revision REVISION of harness profile PROFILE (health and capabilities) and records whether it is verified.",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON := jsonFlag(fs)
			return func(ctx context.Context, a []string) error {
				if err := checkID("harness profile", a[0]); err != nil {
					return err
				}
				rev, err := strconv.ParseInt(a[1], 10, 64)
				if err != nil || rev < 1 {
					return fail(exitUsage, "admin validate: REVISION must be a positive integer, not %q", a[1])
				}
				return c.printAs(*asJSON)(c.call(ctx, "POST", withQuery(apiPath("/api/harnesses/{}/validate", a[0]), "revision", a[1]), nil))
			}
		}},
	{name: "member", args: "EMAIL", min: 1, max: 1, summary: "create an account that may use the assistant",
		help: "Creates the account EMAIL (password from PA_PASSWORD or stdin) as a member. Prints what it would do;\ncreates it only with -yes.",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON, yes := jsonFlag(fs), yesFlag(fs)
			name := fs.String("name", "", "the member's display name")
			return func(ctx context.Context, a []string) error {
				if !*yes {
					fmt.Fprintf(c.errw, "plan (commit with -yes): create the account %s as a member\n", a[0])
					return nil
				}
				return c.printAs(*asJSON)(c.call(ctx, "POST", "/api/members", map[string]any{"email": a[0], "password": c.password(), "name": *name}))
			}
		}},
	backupCommand, restoreCommand, releaseCommand, rollbackCommand, // backup.go
	runtimeCommand, // runtime.go
	memberSwitch("admit", "let an existing account use the assistant", true),
	memberSwitch("remove", "stop an account from using the assistant", false),
	{name: "invite", min: 0, max: 0, summary: "issue a single-use invitation",
		help: "Issues an invitation that makes one account when redeemed, then expires. The token is printed once;\nthe invitee redeems it on the sign-up page (or POST /api/invitations/redeem). Issues it only with -yes.",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON, yes := jsonFlag(fs), yesFlag(fs)
			hours := fs.Int("hours", 72, "how many `hours` the invitation stays valid (1-720)")
			return func(ctx context.Context, _ []string) error {
				if *hours < 1 || *hours > 720 {
					return fail(exitUsage, "admin invite: -hours must be 1..720")
				}
				if !*yes {
					fmt.Fprintf(c.errw, "plan (commit with -yes): issue an invitation valid for %d hours\n", *hours)
					return nil
				}
				b, err := c.call(ctx, "POST", "/api/invitations", map[string]any{"expiresInHours": *hours})
				var inv struct{ ID, Token, ExpiresAt string }
				if err != nil || *asJSON || json.Unmarshal(b, &inv) != nil || inv.Token == "" {
					return c.print(*asJSON, b, err)
				}
				fmt.Fprintf(c.out, "Invitation %s, valid until %s, single use.\nToken (shown only now; send it privately, the invitee enters it on the sign-up page):\n%s\n",
					inv.ID, minute(inv.ExpiresAt), inv.Token)
				return nil
			}
		}},
	{name: "select", args: "ROLE=HARNESS@REV:ROUTE@REV[:tool,tool] ...", min: 1, max: -1, summary: "choose each work role's harness and route",
		help: "Replaces which harness and route revision each work role uses (roles left out are removed), with the\ntools each role may use (a role can only narrow the tool ceiling). Prints the plan; commits only with -yes:\nthe change is checked and goes live, unless another admin must approve it first (pa admin candidates).\nWith -propose it stays a candidate until pa admin promote.",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON, yes := jsonFlag(fs), yesFlag(fs)
			propose := fs.Bool("propose", false, "stop at the candidate: promote it later (pa admin promote)")
			return func(ctx context.Context, a []string) error {
				roles := map[string]any{}
				for _, spec := range a {
					role, rb, err := parseRole(spec)
					if err != nil {
						return err
					}
					if _, dup := roles[role]; dup {
						return fail(exitUsage, "admin select: role %q is named twice", role)
					}
					roles[role] = rb
				}
				cur, err := c.call(ctx, "GET", "/api/settings", nil)
				if err != nil {
					return err
				}
				var s struct {
					Revision int64 `json:"revision"`
				}
				if err := json.Unmarshal(cur, &s); err != nil {
					return fmt.Errorf("read settings: %w", err)
				}
				body := map[string]any{"expectedRevision": s.Revision, "roles": roles}
				if *propose {
					body["propose"] = true // stops at the candidate (pa admin candidates, promote)
				}
				return c.commit(ctx, *asJSON, *yes, "PUT", "/api/harness-selection", body)
			}
		}},
}, append(peopleCommands, releaseCommands...)...) // people.go, releases.go

// memberSwitch admits (member) or removes an existing account by its user id.
func memberSwitch(name, summary string, member bool) *command {
	return &command{name: name, args: "USER", min: 1, max: 1, summary: summary,
		help: strings.ToUpper(summary[:1]) + summary[1:] + " (USER: an id from pa admin members). Commits only with -yes.",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON, yes := jsonFlag(fs), yesFlag(fs)
			return func(ctx context.Context, a []string) error {
				if err := checkID("user", a[0]); err != nil {
					return err
				}
				if !*yes {
					fmt.Fprintf(c.errw, "plan (commit with -yes): %s %s\n", name, a[0])
					return nil
				}
				return c.printMember(*asJSON)(c.call(ctx, "PUT", apiPath("/api/members/{}", a[0]), map[string]any{"member": member}))
			}
		}}
}

func yesFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("yes", false, "commit (without it, only the plan is printed)")
}

func adminGet(name, summary, path string) *command {
	return &command{name: name, summary: summary, min: 0, max: 0, help: strings.ToUpper(summary[:1]) + summary[1:] + ".",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON := jsonFlag(fs)
			return func(ctx context.Context, _ []string) error {
				return c.render(*asJSON, adminView(path))(c.call(ctx, "GET", path, nil)) // adminviews.go
			}
		}}
}

// commit previews a mutation and, with yes, commits it against the revision the plan was
// based on.
func (c *cli) commit(ctx context.Context, asJSON, yes bool, method, path string, body map[string]any) error {
	body["preview"] = true
	b, err := c.call(ctx, method, path, body)
	if err != nil {
		return c.print(asJSON, b, err)
	}
	if !yes {
		fmt.Fprintln(c.errw, "plan (commit with -yes):")
		return c.print(asJSON, b, nil)
	}
	var p struct {
		Plan struct {
			BasedOn int64 `json:"basedOnRevision"`
		} `json:"plan"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return fmt.Errorf("read plan: %w", err)
	}
	body["preview"] = false
	if _, ok := body["expectedRevision"]; !ok || method == "POST" {
		body["expectedRevision"] = p.Plan.BasedOn
	}
	return c.printAs(asJSON)(c.call(ctx, method, path, body))
}

// parseRole reads ROLE=HARNESS@REV:ROUTE@REV[:tool,tool].
func parseRole(spec string) (string, map[string]any, error) {
	bad := fail(exitUsage, "admin select: bad role %q: use ROLE=HARNESS@REV:ROUTE@REV[:tool,tool]", spec)
	role, rest, ok := strings.Cut(spec, "=")
	parts := strings.Split(rest, ":")
	if !ok || role == "" || len(parts) < 2 || len(parts) > 3 {
		return "", nil, bad
	}
	h, hr, ok1 := strings.Cut(parts[0], "@")
	r, rr, ok2 := strings.Cut(parts[1], "@")
	hrev, e1 := strconv.ParseInt(hr, 10, 64)
	rrev, e2 := strconv.ParseInt(rr, 10, 64)
	if !ok1 || !ok2 || h == "" || r == "" || e1 != nil || e2 != nil || hrev < 1 || rrev < 1 {
		return "", nil, bad
	}
	b := map[string]any{"harness": h, "harnessRevision": hrev, "route": r, "routeRevision": rrev}
	if len(parts) > 2 {
		tools := []string{}
		for _, t := range strings.Split(parts[2], ",") {
			if t != "" {
				tools = append(tools, t)
			}
		}
		b["tools"] = tools
	}
	return role, b, nil
}
