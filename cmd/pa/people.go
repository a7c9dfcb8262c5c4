package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
)

// The admin's people commands (issue 33 item 6): the members and pending invitations as
// tables, revoking an invitation, setting a role; -json prints the API's answer as is.

var peopleCommands = []*command{
	{name: "members", min: 0, max: 0, summary: "list every account: name, email, role, joined, invited by",
		help: "Lists every account with its role (admin, member, or none: signed up but not admitted), when it\njoined and which admin invited it. The id is what admit, remove and role take.",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON := jsonFlag(fs)
			return func(ctx context.Context, _ []string) error {
				b, err := c.call(ctx, "GET", "/api/members", nil)
				if err != nil || *asJSON {
					return c.print(*asJSON, b, err)
				}
				var l struct {
					Members []struct{ ID, Name, Email, Role, JoinedAt, InvitedBy string }
				}
				if err := json.Unmarshal(b, &l); err != nil {
					return fmt.Errorf("read the members: %w", err)
				}
				tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tEMAIL\tROLE\tJOINED\tINVITED BY\tID")
				for _, m := range l.Members {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", dash(m.Name), m.Email, roleWords(m.Role), day(m.JoinedAt), dash(m.InvitedBy), m.ID)
				}
				return tw.Flush()
			}
		}},
	{name: "invitations", min: 0, max: 0, summary: "list the pending invitations: who invited, when, until when",
		help: "Lists the invitations not used yet and not expired (their links are shown only once, when made).\nThe id is what revoke takes.",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON := jsonFlag(fs)
			return func(ctx context.Context, _ []string) error {
				b, err := c.call(ctx, "GET", "/api/invitations", nil)
				if err != nil || *asJSON {
					return c.print(*asJSON, b, err)
				}
				var l struct {
					Invitations []struct{ ID, InvitedBy, InvitedAt, ExpiresAt string }
				}
				if err := json.Unmarshal(b, &l); err != nil {
					return fmt.Errorf("read the invitations: %w", err)
				}
				if len(l.Invitations) == 0 {
					fmt.Fprintln(c.out, "No invitation is pending.")
					return nil
				}
				tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "INVITED BY\tINVITED\tVALID UNTIL\tID")
				for _, i := range l.Invitations {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", i.InvitedBy, minute(i.InvitedAt), minute(i.ExpiresAt), i.ID)
				}
				return tw.Flush()
			}
		}},
	{name: "revoke", args: "INVITATION", min: 1, max: 1, summary: "revoke a pending invitation",
		help: "Revokes the pending invitation INVITATION (an id from pa admin invitations): its link stops working.\nRevokes only with -yes.",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON, yes := jsonFlag(fs), yesFlag(fs)
			return func(ctx context.Context, a []string) error {
				if err := checkID("invitation", a[0]); err != nil {
					return err
				}
				if !*yes {
					fmt.Fprintf(c.errw, "plan (commit with -yes): revoke the invitation %s\n", a[0])
					return nil
				}
				b, err := c.call(ctx, "DELETE", apiPath("/api/invitations/{}", a[0]), nil)
				if err != nil || *asJSON {
					return c.print(*asJSON, b, err)
				}
				fmt.Fprintln(c.out, "Revoked: its link no longer works.")
				return nil
			}
		}},
	{name: "role", args: "USER admin|member", min: 2, max: 2, summary: "make a member an admin, or an admin a member",
		help: "Sets the role of account USER (an id from pa admin members). You cannot change your own role.\nCommits only with -yes.",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			asJSON, yes := jsonFlag(fs), yesFlag(fs)
			return func(ctx context.Context, a []string) error {
				if err := checkID("user", a[0]); err != nil {
					return err
				}
				if a[1] != "admin" && a[1] != "member" {
					return fail(exitUsage, "admin role: the role must be admin or member, not %q", a[1])
				}
				if !*yes {
					fmt.Fprintf(c.errw, "plan (commit with -yes): make %s %s\n", a[0], article(a[1]))
					return nil
				}
				return c.printMember(*asJSON)(c.call(ctx, "PUT", apiPath("/api/members/{}", a[0]), map[string]any{"role": a[1]}))
			}
		}},
}

// printMember prints an account the API answered in one sentence (-json: as is).
func (c *cli) printMember(asJSON bool) func(json.RawMessage, error) error {
	return func(b json.RawMessage, err error) error {
		if err != nil || asJSON {
			return c.print(asJSON, b, err)
		}
		var m struct {
			ID, Email string
			Labels    []string
			Member    bool
		}
		if json.Unmarshal(b, &m) != nil || m.ID == "" {
			return c.print(false, b, nil)
		}
		role := "no longer a member"
		switch {
		case contains(m.Labels, "admin"):
			role = "an admin"
		case m.Member:
			role = "a member"
		}
		fmt.Fprintf(c.out, "%s (%s) is %s now.\n", dash(m.Email), m.ID, role)
		return nil
	}
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func article(role string) string {
	if role == "admin" {
		return "an admin"
	}
	return "a member"
}

func roleWords(r string) string {
	if r == "none" {
		return "not admitted"
	}
	return r
}

func dash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}

// day and minute show an API time in UTC (the raw value if it does not parse).
func day(s string) string    { return whenAs(s, "2006-01-02") }
func minute(s string) string { return whenAs(s, "2006-01-02 15:04 UTC") }
func whenAs(s, layout string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return dash(s)
	}
	return t.UTC().Format(layout)
}
