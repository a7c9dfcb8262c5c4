package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
)

// Found is a benchmark function in the tree: its package directory ("./agent/gpu") and name.
type Found struct{ Pkg, Name string }

// discover lists every top-level Benchmark function of the _test.go files under root,
// as `go test ./...` sees them: directories named testdata, vendor or node_modules and
// those starting with "." or "_" are not packages of the module.
func discover(root string) ([]Found, error) {
	var out []Found
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "vendor" || name == "node_modules" ||
				strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		pkg := "./" + filepath.ToSlash(rel)
		if rel == "." {
			pkg = "."
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if ok && fn.Recv == nil && isBenchmark(fn) {
				out = append(out, Found{pkg, fn.Name.Name})
			}
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool {
		if out[i].Pkg != out[j].Pkg {
			return out[i].Pkg < out[j].Pkg
		}
		return out[i].Name < out[j].Name
	})
	return out, err
}

// isBenchmark is testing's rule: BenchmarkXxx (Xxx not starting with a lower-case letter)
// taking one *testing.B.
func isBenchmark(fn *ast.FuncDecl) bool {
	name := fn.Name.Name
	if !strings.HasPrefix(name, "Benchmark") {
		return false
	}
	if rest := name[len("Benchmark"):]; rest != "" && rest[0] >= 'a' && rest[0] <= 'z' {
		return false
	}
	params := fn.Type.Params.List
	if len(params) != 1 || len(params[0].Names) > 1 {
		return false
	}
	star, ok := params[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	sel, ok := star.X.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "B"
}

// complete returns plan with an entry at DefaultBenchtime for every found benchmark the
// plan does not name (missing), and the planned benchmarks not found in the tree (stale).
func complete(plan []Entry, found []Found) (all []Entry, missing, stale []Found) {
	planned := map[Found]bool{}
	for _, e := range plan {
		planned[Found{e.Pkg, e.Bench}] = true
	}
	exists := map[Found]bool{}
	all = append(all, plan...)
	for _, f := range found {
		exists[f] = true
		if !planned[f] {
			missing = append(missing, f)
			all = append(all, Entry{Pkg: f.Pkg, Bench: f.Name, Benchtime: DefaultBenchtime,
				Note: "not in scripts/bench/plan.go: run once"})
		}
	}
	for _, e := range plan {
		if !exists[Found{e.Pkg, e.Bench}] {
			stale = append(stale, Found{e.Pkg, e.Bench})
		}
	}
	return all, missing, stale
}
