package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"
)

// topCommands is the command table of pa.
var topCommands = []*command{
	{name: "login", args: "EMAIL", min: 1, max: 1, summary: "sign in (password from PA_PASSWORD or stdin)",
		help: "Opens an Appwrite session as EMAIL and keeps it in $PA_CONFIG_DIR/session (mode 0600).\nThe password is read from PA_PASSWORD, or from the first line of stdin.",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			return func(ctx context.Context, a []string) error { return c.login(ctx, a[0]) }
		}},
	{name: "logout", min: 0, max: 0, summary: "forget the session",
		help: "Removes the kept session.",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			return func(context.Context, []string) error { return c.logout() }
		}},
	{name: "conversations", min: 0, max: 0, summary: "list your conversations",
		help: "Lists your conversations, newest first (up to 100).",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON := jsonFlag(fs)
			return func(ctx context.Context, _ []string) error {
				return c.render(*asJSON, showConversations)(c.call(ctx, "GET", withQuery("/api/conversations", "limit", "100"), nil))
			}
		}},
	{name: "new", args: "TITLE", min: 1, max: 1, summary: "start a conversation",
		help: "Creates a conversation called TITLE and prints it (its id is what send takes).",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON := jsonFlag(fs)
			return func(ctx context.Context, a []string) error {
				return c.render(*asJSON, showConversation)(c.call(ctx, "POST", "/api/conversations", map[string]any{"title": a[0], "requestId": reqID()}))
			}
		}},
	{name: "send", args: "CONVERSATION TEXT", min: 2, max: 2, summary: "send a message (starts a run)",
		help: "Sends TEXT to the conversation and prints the admitted message and run (follow it with pa tail RUN).\n" +
			"-attach FILE (repeatable) uploads files first, readable by you alone, as the web's Attach does\n" +
			"(at most 5 files, 10 MiB each, 25 MiB together; text, data, code, PDF or images).\nUse -- before a TEXT that starts with a dash.",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON := jsonFlag(fs)
			role := fs.String("role", "", "the work role that answers (default: the conversation's)")
			var files []string
			fs.Func("attach", "attach `FILE` to the message (repeat for more)", func(p string) error { files = append(files, p); return nil })
			return func(ctx context.Context, a []string) error {
				if err := checkID("conversation", a[0]); err != nil {
					return err
				}
				if err := checkAttachments(files); err != nil {
					return err
				}
				body := map[string]any{"requestId": reqID(), "text": a[1]}
				if *role != "" {
					// Offer only the roles the server says this user may use.
					if err := c.checkRole(ctx, *role); err != nil {
						return err
					}
					body["role"] = *role
				}
				if len(files) > 0 {
					ids, err := c.uploadAttachments(ctx, files)
					if err != nil {
						return err
					}
					body["attachments"] = ids
				}
				return c.render(*asJSON, showAdmitted)(c.call(ctx, "POST", apiPath("/api/conversations/{}/messages", a[0]), body))
			}
		}},
	{name: "roles", min: 0, max: 0, summary: "list the work roles you may use",
		help: "Lists the work roles you may use (send -role takes one of them) and the tools each may use.",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON := jsonFlag(fs)
			return func(ctx context.Context, _ []string) error {
				return c.render(*asJSON, showRoles)(c.call(ctx, "GET", "/api/roles", nil))
			}
		}},
	{name: "runs", min: 0, max: 0, summary: "list your runs",
		help: "Lists your runs, newest first (up to 100).",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON := jsonFlag(fs)
			conv := fs.String("conversation", "", "only the runs of this conversation `ID`")
			return func(ctx context.Context, _ []string) error {
				return c.render(*asJSON, showRuns)(c.call(ctx, "GET", withQuery("/api/runs", "limit", "100", "conversationId", *conv), nil))
			}
		}},
	{name: "tail", args: "RUN", min: 1, max: 1, summary: "follow a run's events until it ends",
		help: "Prints a run's events as they happen (the answer's text as it streams) until the run ends.\nExits 6 when the run ends other than completed.",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON := fs.Bool("json", false, "print each event as one JSON line")
			return func(ctx context.Context, a []string) error {
				if err := checkID("run", a[0]); err != nil {
					return err
				}
				return c.tail(ctx, a[0], *asJSON)
			}
		}},
	{name: "cancel", args: "RUN", min: 1, max: 1, summary: "cancel a run",
		help: "Asks for a run to be cancelled (a repeat is harmless).",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON := jsonFlag(fs)
			return func(ctx context.Context, a []string) error {
				if err := checkID("run", a[0]); err != nil {
					return err
				}
				return c.render(*asJSON, showCancel)(c.call(ctx, "POST", apiPath("/api/runs/{}/cancel", a[0]), map[string]any{}))
			}
		}},
	{name: "approve", args: "RUN REQUEST once|deny", min: 3, max: 3, summary: "answer a run's pending approval",
		help: "Answers the approval REQUEST a run waits on: once allows the action this time, deny refuses it.\n" +
			"Prints what it would answer; answers only with -yes (pa chat asks and answers inline instead).",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON, yes := jsonFlag(fs), yesFlag(fs)
			return func(ctx context.Context, a []string) error {
				if err := checkID("run", a[0]); err != nil {
					return err
				}
				if a[2] != "once" && a[2] != "deny" {
					return fail(exitUsage, "approve: the choice must be once or deny, not %q", a[2])
				}
				if !*yes {
					fmt.Fprintf(c.errw, "plan (commit with -yes): answer request %s of run %s: %s\n", a[1], a[0], strings.ToLower(choiceWords(a[2])))
					return nil
				}
				return c.render(*asJSON, showApproval)(c.call(ctx, "POST", apiPath("/api/runs/{}/approval", a[0]), map[string]any{"requestId": a[1], "choice": a[2]}))
			}
		}},
	chatCommand, // interactive.go
	{name: "admin", summary: "configuration (administrators only)", sub: adminCommands},
}

func reqID() string { return fmt.Sprintf("cli-%d", time.Now().UnixNano()) }
