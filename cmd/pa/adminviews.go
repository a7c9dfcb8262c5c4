package main

// The human views of pa admin's listings (admin.go's adminGet picks one by path; an
// answer without a view prints as indented JSON).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// adminViews are the views of adminGet's paths.
var adminViews = map[string]func(io.Writer, json.RawMessage) error{
	"/api/harnesses":    showHarnesses,
	"/api/model-routes": showRoutes,
	"/api/audit":        showAudit,
	"/api/settings":     showSettings,
}

// adminView is the view of path: a table, or the answer as indented JSON.
func adminView(path string) func(io.Writer, json.RawMessage) error {
	if v, ok := adminViews[path]; ok {
		return v
	}
	return showIndented
}

func showIndented(w io.Writer, b json.RawMessage) error {
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, b, "", "  "); err != nil {
		return err
	}
	fmt.Fprintln(w, pretty.String())
	return nil
}

func rev(n int64) string { return strconv.FormatInt(n, 10) }

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func showHarnesses(w io.Writer, b json.RawMessage) error {
	var v struct {
		Harnesses []struct {
			ProfileID, Kind, BaseURL string
			Revision                 int64
			ProfileName              *string
			Verified                 bool
			HermesVersion            *string
		}
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	rows := [][]string{}
	for _, h := range v.Harnesses {
		rows = append(rows, []string{h.ProfileID, rev(h.Revision), h.Kind, yesNo(h.Verified), deref(h.HermesVersion), h.BaseURL})
	}
	table(w, []string{"PROFILE", "REV", "KIND", "VERIFIED", "HERMES", "URL"}, rows)
	return nil
}

func showRoutes(w io.Writer, b json.RawMessage) error {
	var v struct {
		Routes []struct {
			RouteID, Alias, Device, BackendModel string
			Revision, ContextBudget              int64
			MaxOutput                            *int64
			Enabled                              bool
			Qualification                        *string
		}
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	rows := [][]string{}
	for _, r := range v.Routes {
		qual := "never"
		if r.Qualification != nil {
			var q struct{ Passed bool }
			if json.Unmarshal([]byte(*r.Qualification), &q) == nil {
				qual = map[bool]string{true: "passed", false: "failed"}[q.Passed]
			}
		}
		maxOut := "-"
		if r.MaxOutput != nil && *r.MaxOutput > 0 {
			maxOut = rev(*r.MaxOutput)
		}
		rows = append(rows, []string{r.RouteID, rev(r.Revision), r.Alias, r.Device, r.BackendModel, rev(r.ContextBudget), maxOut, yesNo(r.Enabled), qual})
	}
	table(w, []string{"ROUTE", "REV", "ALIAS", "DEVICE", "MODEL", "CONTEXT", "MAX OUT", "ENABLED", "QUALIFIED"}, rows)
	return nil
}

func showAudit(w io.Writer, b json.RawMessage) error {
	var v struct {
		Audit []struct {
			ActorID, Action, Target, At string
			FromRevision, ToRevision    *int64
		}
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	rows := [][]string{}
	for _, a := range v.Audit {
		change := ""
		if a.ToRevision != nil {
			change = "→ " + rev(*a.ToRevision)
			if a.FromRevision != nil {
				change = rev(*a.FromRevision) + " " + change
			}
		}
		rows = append(rows, []string{when(a.At), a.Action, a.Target, change, a.ActorID})
	}
	table(w, []string{"AT", "ACTION", "TARGET", "REVISION", "BY"}, rows)
	return nil
}

func showSettings(w io.Writer, b json.RawMessage) error {
	var v struct {
		Revision int64
		Roles    map[string]struct {
			Harness, Route                 string
			HarnessRevision, RouteRevision int64
			Tools                          *[]string
		}
		ToolCeiling []string
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	fmt.Fprintf(w, "Settings revision %d. Tool ceiling: %s.\n\n", v.Revision, strings.Join(v.ToolCeiling, ", "))
	names := make([]string, 0, len(v.Roles))
	for n := range v.Roles {
		names = append(names, n)
	}
	sort.Strings(names)
	rows := [][]string{}
	for _, n := range names {
		r := v.Roles[n]
		tools := "(the ceiling)"
		if r.Tools != nil {
			tools = strings.Join(*r.Tools, ", ")
			if tools == "" {
				tools = "(none)"
			}
		}
		rows = append(rows, []string{n, r.Harness + "@" + rev(r.HarnessRevision), r.Route + "@" + rev(r.RouteRevision), tools})
	}
	table(w, []string{"ROLE", "HARNESS", "ROUTE", "TOOLS"}, rows)
	return nil
}
