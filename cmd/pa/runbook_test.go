package main

import (
	"bufio"
	"flag"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// runbookCommands are the pa command lines of deploy/RUNBOOK.md's shell blocks.
func runbookCommands(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("../../deploy/RUNBOOK.md")
	require.NoError(t, err)
	defer f.Close()
	var out []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "```sh"):
			in = true
		case strings.HasPrefix(line, "```"):
			in = false
		case in && strings.HasPrefix(line, "pa "):
			out = append(out, line)
		}
	}
	require.NoError(t, sc.Err())
	return out
}

// words splits a shell line the simple way the runbook writes them: spaces, and double
// quotes around one word.
func words(line string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`"[^"]*"|\S+`).FindAllString(line, -1) {
		out = append(out, strings.Trim(m, `"`))
	}
	return out
}

// TestRunbookCommandsAreTheTestedOnes: every pa line of the runbook is a command the CLI
// has, with flags it knows and the right number of arguments; the lines the tests run
// (backup_test.go) are in it word for word; and the backup unit runs the runbook's line.
func TestRunbookCommandsAreTheTestedOnes(t *testing.T) {
	lines := runbookCommands(t)
	require.NotEmpty(t, lines)
	cmds := every("", topCommands)
	for _, line := range lines {
		w := words(line)[1:] // drop "pa"
		var cmd *command
		var rest []string
		for n := len(w); n > 0 && cmd == nil; n-- {
			if c, ok := cmds[strings.Join(w[:n], " ")]; ok {
				cmd, rest = c, w[n:]
			}
		}
		require.NotNil(t, cmd, "runbook: %q is not a pa command", line)
		fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cmd.setup(fs, newCLI(nil, io.Discard, io.Discard))
		pos, err := parseInterspersed(fs, rest)
		require.NoError(t, err, "runbook: %q", line)
		require.GreaterOrEqual(t, len(pos), cmd.min, line)
		if cmd.max >= 0 {
			require.LessOrEqual(t, len(pos), cmd.max, line)
		}
	}
	for _, tested := range []string{
		`pa admin backup -key-ref env:APPWRITE_API_KEY "$ARCHIVE"`,
		`pa admin restore "$ARCHIVE"`,
		`pa admin restore -yes "$ARCHIVE"`,
		`pa admin rollback`,
		`pa admin rollback -yes`,
		`pa admin backup -key-ref "file:$CREDENTIALS_DIRECTORY/appwrite-backup-key" "/var/backups/privateassistant/pa-backup-$(date -u +%F).tar"`,
	} {
		require.Contains(t, lines, tested, "the runbook shows the command the tests run")
	}
	unit, err := os.ReadFile("../../deploy/systemd/privateassistant-backup.service")
	require.NoError(t, err)
	exec := regexp.MustCompile(`(?m)^ExecStart=/bin/sh -c 'exec /usr/local/bin/(pa admin backup [^']*)'$`).FindSubmatch(unit)
	require.NotNil(t, exec, "the unit runs pa admin backup")
	require.Contains(t, lines, strings.ReplaceAll(string(exec[1]), "%%", "%"), "the unit runs the runbook's line (%% is systemd's %)")
	require.Contains(t, string(unit), "UMask=0077")
	timer, err := os.ReadFile("../../deploy/systemd/privateassistant-backup.timer")
	require.NoError(t, err)
	require.Contains(t, string(timer), "Persistent=true")
	require.Contains(t, string(timer), "Unit=privateassistant-backup.service")
}
