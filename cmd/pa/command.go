package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// command is one subcommand. Each run builds a FlagSet of its own (setup registers the
// command's flags on it and returns the action), so `pa X -help` lists exactly X's flags.
type command struct {
	name    string // "send", or "route" under "admin"
	args    string // the positional synopsis, e.g. "CONVERSATION TEXT"
	summary string // one line for the command list
	help    string // what the command does, for its -help
	min     int    // positional arguments required
	max     int    // at most (-1: any number)
	setup   func(fs *flag.FlagSet, c *cli) func(ctx context.Context, args []string) error
	sub     []*command // a command group ("admin") has subcommands instead of setup
}

// errHelpShown ends a run whose help was asked for (exit 0).
var errHelpShown = &exitErr{code: exitOK}

// dispatch runs the command args[0] of cmds (prefix is the parent's name, "" at the top).
func dispatch(ctx context.Context, c *cli, cmds []*command, prefix string, args []string) error {
	name := ""
	if len(args) > 0 {
		name, args = args[0], args[1:]
	}
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) > 0 {
			// pa help admin route == pa admin route -help
			return dispatch(ctx, c, cmds, prefix, append(slices.Clone(args), "-help"))
		}
		listUsage(c.out, cmds, prefix)
		return errHelpShown
	case "":
		listUsage(c.errw, cmds, prefix)
		return &exitErr{code: exitUsage}
	}
	for _, cmd := range cmds {
		if cmd.name == name {
			if cmd.sub != nil {
				return dispatch(ctx, c, cmd.sub, join(prefix, name), args)
			}
			return cmd.run(ctx, c, join(prefix, name), args)
		}
	}
	return fail(exitUsage, "unknown command %q; run 'pa %s' for the list", name, join(prefix, "help"))
}

func join(a, b string) string { return strings.TrimSpace(a + " " + b) }

// listUsage prints the command list of a group.
func listUsage(w io.Writer, cmds []*command, prefix string) {
	fmt.Fprintf(w, "Usage: pa %s <command> [flags] [arguments]\n\nCommands:\n", join(prefix, ""))
	for _, cmd := range cmds {
		fmt.Fprintf(w, "  %-14s %s\n", cmd.name, cmd.summary)
	}
	fmt.Fprintf(w, "\nRun 'pa %s <command> -help' for a command's flags and arguments.\n", join(prefix, ""))
	if prefix == "" {
		fmt.Fprint(w, "\nSettings: PA_URL, APPWRITE_ENDPOINT, APPWRITE_PROJECT_ID, PA_CONFIG_DIR (environment, then .env).\n"+
			"Exit codes: 0 ok, 1 error, 2 usage, 3 not signed in, 4 not found, 5 conflict, 6 the run did not complete.\n")
	}
}

// usage prints a command's help.
func (cmd *command) usage(w io.Writer, full string, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: pa %s [flags] %s\n\n%s\n", full, cmd.args, cmd.help)
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprint(w, "\nFlags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
}

func (cmd *command) run(ctx context.Context, c *cli, full string, args []string) error {
	fs := flag.NewFlagSet("pa "+full, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors and help are printed below, once
	action := cmd.setup(fs, c)
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		cmd.usage(c.out, full, fs)
		return errHelpShown
	}
	if err != nil {
		return fail(exitUsage, "%s: %v\nRun 'pa %s -help' for usage.", full, err, full)
	}
	switch {
	case len(pos) < cmd.min:
		return fail(exitUsage, "%s: missing arguments: want %s\nRun 'pa %s -help' for usage.", full, cmd.args, full)
	case cmd.max >= 0 && len(pos) > cmd.max:
		return fail(exitUsage, "%s: too many arguments (%q): want %s\nRun 'pa %s -help' for usage.", full, pos[cmd.max:], cmd.args, full)
	}
	return action(ctx, pos)
}

// parseInterspersed parses flags wherever they stand among the positional arguments
// (the standard flag package stops at the first positional one); "--" ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// jsonFlag registers -json on fs.
func jsonFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("json", false, "print the raw JSON answer")
}
