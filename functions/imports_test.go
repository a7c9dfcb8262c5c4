// Package functions_test checks the layering of the functions: they are deployed on their
// own, so they must not depend on the agent, and only the edge speaks HTTP.
package functions_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// deps lists each package under functions/ with its transitive dependencies.
func deps(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-e", "-f", `{{.ImportPath}} {{join .Deps " "}}`, "privateassistant/functions/...").CombinedOutput()
	require.NoError(t, err, "%s", out)
	m := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		require.NotEmpty(t, f)
		m[f[0]] = f[1:]
	}
	require.Contains(t, m, "privateassistant/functions/service", "go list found the functions")
	return m
}

func TestFunctionsDoNotImportTheAgent(t *testing.T) {
	for pkg, ds := range deps(t) {
		for _, d := range ds {
			require.False(t, d == "privateassistant/agent" || strings.HasPrefix(d, "privateassistant/agent/"),
				"%s depends on %s: functions may use hermes/, keyref/, queue/ and schema/, never agent/", pkg, d)
		}
	}
}

// TestOnlyNamedTestsDriveTheAgent: test files may import agent/ only where a test proves
// a protocol across both sides, and each such import is named here.
func TestOnlyNamedTestsDriveTheAgent(t *testing.T) {
	allowed := map[string][]string{
		// The admission tests prove that the agent's outbox heals a crash between the
		// writes and the enqueue (functions/admit/doc.go, invariant 6).
		// The harness validation tests prove that a request the admin API records is
		// completed by the agent, which holds the key (issue #11).
		// The overflow test stores a long answer under the id the executor gives it
		// (executor.AssistantMessageID), so the functions read it back whole.
		// The deleted-conversation tests race the agent's late artifact upload
		// (artifacts.Uploader) against the delete (issue 30: nothing stays readable).
		"privateassistant/functions/service": {"privateassistant/agent/executor", "privateassistant/agent/outbox", "privateassistant/agent/validator", "privateassistant/agent/artifacts"},
	}
	out, err := exec.Command("go", "list", "-e", "-f", `{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}`, "privateassistant/functions/...").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, "privateassistant/agent/") {
				require.Contains(t, allowed[f[0]], imp, "%s's tests import %s: name it in this test with the reason, or test without the agent", f[0], imp)
			}
		}
	}
}

func TestDomainPackagesDoNotSpeakHTTP(t *testing.T) {
	m := deps(t)
	for _, pkg := range []string{"admit", "control", "settings"} {
		ds, ok := m["privateassistant/functions/"+pkg]
		require.True(t, ok, pkg)
		require.NotContains(t, ds, "privateassistant/functions/httpapi",
			"functions/%s returns fault errors; only functions/httpapi and functions/service know HTTP", pkg)
	}
}
