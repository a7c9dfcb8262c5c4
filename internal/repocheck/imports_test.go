package repocheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The import rules of the layout (docs/design/layout.md, issue 31 item 6): the folders say
// who may use whom, and this test keeps it so.
//
//   - agent/ and functions/ are two deployables that share the domain packages at the top
//     level (admit, control, settings, longpoll, runtimeapi, fault, queue, schema, …); neither
//     imports the other.
//   - The domain packages import neither agent/ nor functions/.
//   - Only the assemblies (cmd/, scripts/, the whole-stack harness stacktest) and the stream
//     service (it serves the functions' own routes beside them: their HTTP edge and checks)
//     import functions/; only the assemblies import agent/.
//   - Test harnesses (a package named xxxtest, and hermes/hermesreal) live at the top level or
//     beside what they stand in for; production code never imports one, except another
//     harness, a harness's own cmd/ and the dev stack in scripts/.
//   - A test outside agent/ that drives a part of the agent is named below with the reason.

const module = "privateassistant/"

type goPackage struct {
	ImportPath string
	Deps       []string // production, transitive
	Imports    []string // production, direct
	TestOnly   []string // what the package's tests import besides
}

func listPackages(t *testing.T) []goPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-f",
		`{{.ImportPath}}|{{join .Deps " "}}|{{join .Imports " "}}|{{join .TestImports " "}} {{join .XTestImports " "}}`,
		"privateassistant/...")
	var stderr strings.Builder
	cmd.Stderr = &stderr // warnings (e.g. a symlinked node_modules in a worktree) are not packages
	out, err := cmd.Output()
	require.NoError(t, err, "%s", stderr.String())
	var pkgs []goPackage
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "|")
		require.Len(t, f, 4, line)
		pkgs = append(pkgs, goPackage{ImportPath: f[0], Deps: ours(f[1]), Imports: ours(f[2]), TestOnly: ours(f[3])})
	}
	require.Greater(t, len(pkgs), 50, "go list found the module's packages")
	return pkgs
}

// ours keeps this module's packages, without the module prefix.
func ours(list string) []string {
	var r []string
	for _, p := range strings.Fields(list) {
		if strings.HasPrefix(p, module) {
			r = append(r, strings.TrimPrefix(p, module))
		}
	}
	return r
}

func rel(importPath string) string { return strings.TrimPrefix(importPath, module) }

// top is a package's top-level folder.
func top(p string) string { return strings.SplitN(p, "/", 2)[0] }

func under(p, tree string) bool { return p == tree || strings.HasPrefix(p, tree+"/") }

// harness reports whether p is a test harness: a package named xxxtest (not its cmd/),
// or the real-Hermes harness.
func harness(p string) bool {
	return p == "hermes/hermesreal" || strings.HasSuffix(path.Base(p), "test")
}

// harnessOrItsCmd reports whether p is a harness or a command under one.
func harnessOrItsCmd(p string) bool {
	if harness(p) {
		return true
	}
	if i := strings.Index(p, "/cmd/"); i > 0 {
		return harness(p[:i])
	}
	return false
}

// assembly reports whether p puts processes together: the CLI, developer entry points,
// the whole-stack harness.
func assembly(p string) bool {
	return under(p, "cmd") || under(p, "scripts") || under(p, "stacktest")
}

// importBreaks lists every production import that breaks the rules.
func importBreaks(pkgs []goPackage) []string {
	var broken []string
	for _, pkg := range pkgs {
		p := rel(pkg.ImportPath)
		for _, d := range pkg.Deps {
			switch {
			case under(d, "agent") && !under(p, "agent") && !assembly(p):
				broken = append(broken, p+" depends on "+d+": only cmd/, scripts/ and stacktest put the agent together with anything")
			case under(d, "functions") && !under(p, "functions") && !assembly(p) && !under(p, "stream"):
				broken = append(broken, p+" depends on "+d+": share the domain through a top-level package (admit, settings, fault, …), not functions/")
			}
		}
		for _, d := range pkg.Imports {
			if harness(d) && !harnessOrItsCmd(p) && !under(p, "scripts") {
				broken = append(broken, p+" imports the test harness "+d+" in production code")
			}
		}
	}
	sort.Strings(broken)
	return broken
}

func TestImportsFollowTheFolders(t *testing.T) {
	require.Empty(t, importBreaks(listPackages(t)))
}

// TestTheImportRulesSeeABreak: each rule refuses the break it is for, and lets the
// allowed shapes through.
func TestTheImportRulesSeeABreak(t *testing.T) {
	pkg := func(p string, deps ...string) goPackage {
		return goPackage{ImportPath: module + p, Deps: deps, Imports: deps}
	}
	for _, tc := range []struct {
		pkg   goPackage
		broke bool
	}{
		{pkg("agent/mcpjobs", "functions/admit"), true},          // the agent reaching into functions/
		{pkg("functions/service", "agent/executor"), true},       // and the other way
		{pkg("queue", "agent/gpu"), true},                        // a domain package using the agent
		{pkg("settings", "functions/httpapi"), true},             // a domain package speaking HTTP
		{pkg("hermes/hermesreal", "agent/modeltest"), true},      // a harness imported upward
		{pkg("agent/executor", "hermes/hermestest"), true},       // production code using a harness
		{pkg("agent/mcpjobs", "admit"), false},                   // the shared domain
		{pkg("stream", "functions/httpapi"), false},              // the stream service on the functions' edge
		{pkg("scripts/dev", "agent/daemon", "modeltest"), false}, // the dev stack
		{pkg("stacktest", "agent/daemon", "functions/service"), false},
		{pkg("schema/appwritetest/cmd/appwrite-emulator", "schema/appwritetest"), false},
		{pkg("hermes/hermesreal", "modeltest"), false}, // a harness using a harness
	} {
		got := importBreaks([]goPackage{tc.pkg})
		require.Equal(t, tc.broke, len(got) > 0, "%s → %v: %v", tc.pkg.ImportPath, tc.pkg.Deps, got)
	}
}

// testsDrivingTheAgent names each test outside agent/ (and the assemblies and deploy/,
// which check what an operator installs) that imports a part of the agent, with its reason.
var testsDrivingTheAgent = map[string]map[string]string{
	"functions/service": {
		"agent/outbox":    "the admission tests prove that the agent's outbox heals a crash between the writes and the enqueue (admit/doc.go, invariant 6)",
		"agent/validator": "the harness validation tests prove that a request the admin API records is completed by the agent, which holds the key (issue #11)",
		"agent/executor":  "the overflow test stores a long answer under the id the executor gives it (executor.AssistantMessageID), so the functions read it back whole",
		"agent/artifacts": "the deleted-conversation tests race the agent's late artifact upload (artifacts.Uploader) against the delete (issue 30: nothing stays readable)",
	},
	"backup": {
		"agent/outbox": "the restore rehearsal re-enqueues the restored unfinished runs with the agent's reconciler",
	},
	"release": {
		"agent/outbox": "the upgrade-order test re-enqueues unfinished runs with the agent's reconciler across the skew",
	},
	"hermes/hermesreal": {
		"agent/validator": "the local-only check of the deploy profile is the agent's validator (validator.LocalOnlyReasons)",
	},
}

func TestOnlyNamedTestsDriveTheAgent(t *testing.T) {
	var unnamed []string
	for _, pkg := range listPackages(t) {
		p := rel(pkg.ImportPath)
		if under(p, "agent") || assembly(p) || under(p, "deploy") {
			continue
		}
		for _, d := range pkg.TestOnly {
			if under(d, "agent") {
				if _, ok := testsDrivingTheAgent[p][d]; !ok {
					unnamed = append(unnamed, p+"'s tests import "+d+": name it in testsDrivingTheAgent with the reason, or test without the agent")
				}
			}
		}
	}
	sort.Strings(unnamed)
	require.Empty(t, unnamed)
}

// edgeErrorBuilders are the httpapi names that choose an HTTP status. Only the HTTP edge
// (functions/httpapi, which maps fault kinds to statuses) and the stream service's own
// edge use them; the functions' handlers speak the domain's one vocabulary, fault.
var edgeErrorBuilders = map[string]bool{"Errorf": true, "BadRequest": true, "NotFound": true, "Unavailable": true, "Error": true}

// serviceStatusErrors lists where a non-test file of functions/service builds an error
// with an HTTP status (httpapi.Errorf, &httpapi.Error{…}, …) instead of a fault kind.
func serviceStatusErrors(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	var found []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		require.NoError(t, err)
		ast.Inspect(file, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "httpapi" && edgeErrorBuilders[sel.Sel.Name] {
				found = append(found, fset.Position(sel.Pos()).String()+": httpapi."+sel.Sel.Name)
			}
			return true
		})
	}
	return found
}

// TestTheFunctionsSpeakOneErrorVocabulary (issue 31 item 6): functions/service answers
// with fault kinds (fault.Missing, fault.Invalidf, fault.Conflictf, …), never with a
// status of its own; httpapi alone turns a kind into a status.
func TestTheFunctionsSpeakOneErrorVocabulary(t *testing.T) {
	root := moduleRoot(t)
	require.Empty(t, serviceStatusErrors(t, filepath.Join(root, "functions", "service")))
	// The scan sees what it is for: a file that builds a status error is found.
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "x.go"), []byte("package service\n\nvar e = &httpapi.Error{Status: 409}\nvar f = httpapi.BadRequest(\"x\", \"y\")\n"), 0o600))
	require.Len(t, serviceStatusErrors(t, dir), 2)
}
