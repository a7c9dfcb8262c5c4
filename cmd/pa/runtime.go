package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
)

// runtimeCommand is pa admin runtime: the runtime keys of host apps (issue 19 item 2).
var runtimeCommand = &command{name: "runtime", summary: "runtime keys for host apps (the /api/v1/responses API)", sub: []*command{
	{name: "create", args: "APP", min: 1, max: 1, summary: "issue a runtime key for host app APP",
		help: "Issues a runtime key for host app APP (a lower-case letter, then up to 23 lower-case letters or digits),\n" +
			"scoped to the roles of -roles. The secret is printed once and stored only as a hash: give it to the\n" +
			"app's server, never to a browser. Issues it only with -yes.",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON, yes := jsonFlag(fs), yesFlag(fs)
			roles := fs.String("roles", "", "the work `roles` the key may use, comma-separated (required)")
			name := fs.String("name", "", "a name for the key (default: APP)")
			limit := fs.Int("rate", 120, "calls allowed per window")
			window := fs.Int("window", 60, "the rate window in `seconds`")
			return func(ctx context.Context, a []string) error {
				var rs []string
				for _, r := range strings.Split(*roles, ",") {
					if r = strings.TrimSpace(r); r != "" {
						rs = append(rs, r)
					}
				}
				if len(rs) == 0 {
					return fail(exitUsage, "admin runtime create: -roles is required")
				}
				if *limit < 1 || *window < 1 {
					return fail(exitUsage, "admin runtime create: -rate and -window must be positive")
				}
				if !*yes {
					fmt.Fprintf(c.errw, "plan (commit with -yes): issue a runtime key for app %s with roles %s, %d calls per %d s\n", a[0], strings.Join(rs, ","), *limit, *window)
					return nil
				}
				return c.printAs(*asJSON)(c.call(ctx, "POST", "/api/runtime-keys", map[string]any{"appId": a[0], "name": *name,
					"roles": rs, "rateLimit": *limit, "rateWindowSeconds": *window}))
			}
		}},
	{name: "list", min: 0, max: 0, summary: "list the runtime keys (never their secrets)",
		help: "Lists the runtime keys: app, roles, rate limit, who issued them and when, and revocation.",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON := jsonFlag(fs)
			return func(ctx context.Context, _ []string) error {
				return c.printAs(*asJSON)(c.call(ctx, "GET", "/api/runtime-keys", nil))
			}
		}},
	{name: "revoke", args: "KEY", min: 1, max: 1, summary: "revoke a runtime key at once",
		help: "Revokes runtime key KEY (its id, rk…): the next call with it is refused. Revokes only with -yes.",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON, yes := jsonFlag(fs), yesFlag(fs)
			return func(ctx context.Context, a []string) error {
				if err := checkID("runtime key", a[0]); err != nil {
					return err
				}
				if !*yes {
					fmt.Fprintf(c.errw, "plan (commit with -yes): revoke runtime key %s\n", a[0])
					return nil
				}
				return c.printAs(*asJSON)(c.call(ctx, "DELETE", apiPath("/api/runtime-keys/{}", a[0]), nil))
			}
		}},
	{name: "link", args: "APP USER [MEMBER]", min: 2, max: 3, summary: "let an app's user act as an existing member",
		help: "Links USER (the app's own id of its user) of host app APP to the existing member MEMBER (an Appwrite\n" +
			"user id): the app then acts for that member, in the member's conversations. Without MEMBER, removes the\n" +
			"link and the app's user is its own app user again. Links only with -yes.",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON, yes := jsonFlag(fs), yesFlag(fs)
			return func(ctx context.Context, a []string) error {
				member := ""
				if len(a) == 3 {
					member = a[2]
				}
				if !*yes {
					if member == "" {
						fmt.Fprintf(c.errw, "plan (commit with -yes): unlink user %q of app %s\n", a[1], a[0])
					} else {
						fmt.Fprintf(c.errw, "plan (commit with -yes): link user %q of app %s to member %s\n", a[1], a[0], member)
					}
					return nil
				}
				return c.printAs(*asJSON)(c.call(ctx, "PUT", "/api/runtime-links", map[string]any{"appId": a[0], "user": a[1], "userId": member}))
			}
		}},
}}
