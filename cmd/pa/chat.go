package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	"privateassistant/internal/backoff"
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
				return c.printAs(*asJSON)(c.call(ctx, "GET", withQuery("/api/conversations", "limit", "100"), nil))
			}
		}},
	{name: "new", args: "TITLE", min: 1, max: 1, summary: "start a conversation",
		help: "Creates a conversation called TITLE and prints it (its id is what send takes).",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON := jsonFlag(fs)
			return func(ctx context.Context, a []string) error {
				return c.printAs(*asJSON)(c.call(ctx, "POST", "/api/conversations", map[string]any{"title": a[0], "requestId": reqID()}))
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
				return c.printAs(*asJSON)(c.call(ctx, "POST", apiPath("/api/conversations/{}/messages", a[0]), body))
			}
		}},
	{name: "roles", min: 0, max: 0, summary: "list the work roles you may use",
		help: "Lists the work roles you may use (send -role takes one of them) and the tools each may use.",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON := jsonFlag(fs)
			return func(ctx context.Context, _ []string) error {
				return c.printAs(*asJSON)(c.call(ctx, "GET", "/api/roles", nil))
			}
		}},
	{name: "runs", min: 0, max: 0, summary: "list your runs",
		help: "Lists your runs, newest first (up to 100).",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON := jsonFlag(fs)
			conv := fs.String("conversation", "", "only the runs of this conversation `ID`")
			return func(ctx context.Context, _ []string) error {
				return c.printAs(*asJSON)(c.call(ctx, "GET", withQuery("/api/runs", "limit", "100", "conversationId", *conv), nil))
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
				return c.printAs(*asJSON)(c.call(ctx, "POST", apiPath("/api/runs/{}/cancel", a[0]), map[string]any{}))
			}
		}},
	{name: "approve", args: "RUN REQUEST once|deny", min: 3, max: 3, summary: "answer a run's pending approval",
		help: "Answers the approval REQUEST a run waits on: once allows the action this time, deny refuses it.",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON := jsonFlag(fs)
			return func(ctx context.Context, a []string) error {
				if err := checkID("run", a[0]); err != nil {
					return err
				}
				if a[2] != "once" && a[2] != "deny" {
					return fail(exitUsage, "approve: the choice must be once or deny, not %q", a[2])
				}
				return c.printAs(*asJSON)(c.call(ctx, "POST", apiPath("/api/runs/{}/approval", a[0]), map[string]any{"requestId": a[1], "choice": a[2]}))
			}
		}},
	{name: "admin", summary: "configuration (administrators only)", sub: adminCommands},
}

func reqID() string { return fmt.Sprintf("cli-%d", time.Now().UnixNano()) }

// tail follows a run until it is terminal, printing each event once.
func (c *cli) tail(ctx context.Context, run string, asJSON bool) error {
	after := int64(0)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Hour)
	defer cancel()
	retry := backoff.Backoff{Min: 500 * time.Millisecond, Max: 10 * time.Second}
	for {
		b, err := c.call(ctx, "GET", withQuery(apiPath("/api/runs/{}/events", run), "after", strconv.FormatInt(after, 10), "wait", "20"), nil)
		var ee *exitErr
		if errors.As(err, &ee) && ee.code != exitError {
			return err
		}
		if err != nil {
			if werr := retry.Wait(ctx); werr != nil {
				return fail(exitError, "gave up following run %s: %v (last error: %v)", run, werr, err)
			}
			continue
		}
		retry.Reset()
		var batch struct {
			Events []struct {
				Sequence int64           `json:"sequence"`
				Type     string          `json:"type"`
				Data     json.RawMessage `json:"data"`
			} `json:"events"`
			Status   string `json:"status"`
			Terminal bool   `json:"terminal"`
		}
		if err := json.Unmarshal(b, &batch); err != nil {
			return fmt.Errorf("read events: %w", err)
		}
		for _, e := range batch.Events {
			switch {
			case asJSON:
				line, _ := json.Marshal(e)
				fmt.Fprintln(c.out, string(line))
			case e.Type == "message.delta":
				var d struct{ Text string }
				_ = json.Unmarshal(e.Data, &d)
				fmt.Fprint(c.out, d.Text)
			default:
				fmt.Fprintf(c.out, "\n[%d %s] %s\n", e.Sequence, e.Type, e.Data)
			}
			after = e.Sequence
		}
		if batch.Terminal {
			if !asJSON {
				fmt.Fprintln(c.out, "\nrun", batch.Status)
			}
			if batch.Status != "completed" {
				return fail(exitIncomplete, "run %s", batch.Status)
			}
			return nil
		}
	}
}
