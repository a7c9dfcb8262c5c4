// Package repocheck reads the repository's Go sources and checks two rules that review
// alone does not keep true (issue 10):
//
//   - every package that starts goroutines checks for leaked ones after its tests
//     (goleak.VerifyTestMain, or goleak.Find in a TestMain that must do more);
//   - every test a doc.go names exists, and each invariant of a protocol doc names one.
//
// The checks are syntactic (go/parser, no type information), so they are cheap enough
// for make test. Its tests run them over the repository.
package repocheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Package is what the scan learned about one directory of Go files.
type Package struct {
	Dir        string   // relative to the scanned root, slash-separated
	Name       string   // the package clause of its non-test files ("" when it has none)
	Starts     []string // where its non-test code starts goroutines ("file.go:12 go")
	HasTests   bool
	LeakCheck  bool   // a TestMain calls goleak.VerifyTestMain or goleak.Find
	Doc        string // the text of its doc.go package comment, if it has a doc.go
	TestFuncs  map[string]bool
	DocGoFound bool
}

// Repo is the result of Scan.
type Repo struct {
	Root     string
	Packages map[string]*Package // by Dir
}

// skipDir: directories that hold no code of the module's own packages.
func skipDir(name string) bool {
	return strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" ||
		name == "node_modules" || name == "vendor" || name == "build"
}

// Scan parses every .go file under root.
func Scan(root string) (*Repo, error) {
	r := &Repo{Root: root, Packages: map[string]*Package{}}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && skipDir(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		pkg := r.Packages[rel]
		if pkg == nil {
			pkg = &Package{Dir: rel, TestFuncs: map[string]bool{}}
			r.Packages[rel] = pkg
		}
		base := filepath.Base(p)
		mode := parser.SkipObjectResolution
		if base == "doc.go" {
			mode |= parser.ParseComments // only a doc.go's package comment is read
		}
		f, err := parser.ParseFile(fset, p, nil, mode)
		if err != nil {
			return fmt.Errorf("parse %s: %w", p, err)
		}
		if strings.HasSuffix(base, "_test.go") {
			pkg.HasTests = true
			scanTest(f, pkg)
			return nil
		}
		if pkg.Name == "" {
			pkg.Name = f.Name.Name
		}
		if base == "doc.go" && f.Doc != nil {
			pkg.Doc, pkg.DocGoFound = f.Doc.Text(), true
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if what := startsGoroutine(n); what != "" {
				pkg.Starts = append(pkg.Starts, fmt.Sprintf("%s:%d %s", base, fset.Position(n.Pos()).Line, what))
			}
			return true
		})
		return nil
	})
	return r, err
}

// startsGoroutine names how n starts a goroutine, or returns "". It sees a go statement,
// the shared lifecycle (internal/startstop), and the library calls this repository uses
// that start goroutines of their own (test servers, asynq servers, AfterFunc).
func startsGoroutine(n ast.Node) string {
	switch n := n.(type) {
	case *ast.GoStmt:
		return "go"
	case *ast.SelectorExpr:
		x, ok := n.X.(*ast.Ident)
		if !ok {
			return ""
		}
		switch x.Name + "." + n.Sel.Name {
		case "startstop.Runner", "startstop.Every", "startstop.Service",
			"httptest.NewServer", "httptest.NewTLSServer", "httptest.NewUnstartedServer",
			"asynq.NewServer", "asynq.NewScheduler", "time.AfterFunc", "context.AfterFunc":
			return x.Name + "." + n.Sel.Name
		}
	}
	return ""
}

// scanTest records a test file's top-level test functions and whether its TestMain
// checks for leaks.
func scanTest(f *ast.File, pkg *Package) {
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Recv != nil {
			continue
		}
		name := fd.Name.Name
		if testName.MatchString(name) {
			pkg.TestFuncs[name] = true
		}
		if name != "TestMain" || fd.Body == nil {
			continue
		}
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			if s, ok := n.(*ast.SelectorExpr); ok {
				if x, ok := s.X.(*ast.Ident); ok && x.Name == "goleak" && (s.Sel.Name == "VerifyTestMain" || s.Sel.Name == "Find") {
					pkg.LeakCheck = true
				}
			}
			return true
		})
	}
}

// testName matches the names go test runs (and TestMain).
var testName = regexp.MustCompile(`^(Test|Benchmark|Fuzz|Example)([A-Z_]\w*)?$`)

// namedTest finds test names in prose; a trailing * names every test with that prefix.
var namedTest = regexp.MustCompile(`\b(?:Test|Benchmark|Fuzz)[A-Z]\w*\*?`)

// LeakGaps lists the packages that start goroutines and do not check for leaks. A package
// without tests passes only when it is a command (package main: its goroutines end with
// the process) or a test helper (a name ending in "test": its goroutines run inside
// other packages' tests, which check them).
func (r *Repo) LeakGaps() []string {
	var out []string
	for _, p := range r.sorted() {
		if len(p.Starts) == 0 || p.LeakCheck {
			continue
		}
		if !p.HasTests && (p.Name == "main" || strings.HasSuffix(p.Name, "test")) {
			continue
		}
		why := "its tests have no TestMain with goleak.VerifyTestMain (or goleak.Find)"
		if !p.HasTests {
			why = "it has no tests, so nothing checks for leaks"
		}
		out = append(out, fmt.Sprintf("%s starts goroutines (%s) but %s", p.Dir, strings.Join(first(p.Starts, 3), ", "), why))
	}
	return out
}

// MissingNamedTests lists the tests doc.go files name that no _test.go file defines.
func (r *Repo) MissingNamedTests() []string {
	all := map[string]bool{}
	for _, p := range r.Packages {
		for n := range p.TestFuncs {
			all[n] = true
		}
	}
	var out []string
	for _, p := range r.sorted() {
		seen := map[string]bool{}
		for _, n := range namedTest.FindAllString(p.Doc, -1) {
			if !defined(all, n) && !seen[n] {
				seen[n] = true
				out = append(out, fmt.Sprintf("%s/doc.go names %s, which no test file defines", p.Dir, n))
			}
		}
	}
	return out
}

// defined reports whether the test name n (or, ending in *, some test with its prefix)
// is among all.
func defined(all map[string]bool, n string) bool {
	prefix, ok := strings.CutSuffix(n, "*")
	if !ok {
		return all[n]
	}
	for name := range all {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// Invariants returns the items of the doc's first section whose heading starts with
// "Invariants": numbered ("1.", "3a.") or bulleted ("-") paragraphs, each with the lines
// that continue it.
func Invariants(doc string) []string {
	var items []string
	in := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "# ") {
			if in {
				break
			}
			in = strings.HasPrefix(line, "# Invariants")
			continue
		}
		if !in {
			continue
		}
		t := strings.TrimSpace(line)
		if itemStart.MatchString(t) {
			items = append(items, t)
			continue
		}
		if len(items) > 0 && t != "" {
			items[len(items)-1] += " " + t
		}
	}
	return items
}

var itemStart = regexp.MustCompile(`^(\d+[a-z]?\.|-)\s`)

// UnprovenInvariants checks a protocol doc: it has an Invariants section, and every item
// in it names a test (or benchmark).
func (r *Repo) UnprovenInvariants(dir string) []string {
	p := r.Packages[dir]
	if p == nil || !p.DocGoFound {
		return []string{dir + " has no doc.go"}
	}
	items := Invariants(p.Doc)
	if len(items) == 0 {
		return []string{dir + "/doc.go has no \"# Invariants\" section with numbered or bulleted items"}
	}
	var out []string
	for _, it := range items {
		if !namedTest.MatchString(it) {
			out = append(out, fmt.Sprintf("%s/doc.go: invariant names no test: %q", dir, clip(it, 120)))
		}
	}
	return out
}

func (r *Repo) sorted() []*Package {
	ps := make([]*Package, 0, len(r.Packages))
	for _, p := range r.Packages {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].Dir < ps[j].Dir })
	return ps
}

func first(s []string, n int) []string {
	if len(s) > n {
		s = s[:n]
	}
	return s
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
