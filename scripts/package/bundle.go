package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

const (
	// ModulePath is this repository's module.
	ModulePath = "privateassistant"
	// HandlerModule is what Appwrite's Go runtime builds a function folder as.
	HandlerModule = "openruntimes/handler"
	// GoDirective must not exceed the runtime image's Go (go-1.26 ships Go 1.26.5).
	GoDirective = "1.26.0"
)

type listedPackage struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	EmbedFiles []string
	Standard   bool
	Module     *struct{ Path, Version string }
}

// goList runs `go list -deps -json` for pkg in root.
func goList(root, pkg string) ([]listedPackage, error) {
	cmd := exec.Command("go", "list", "-deps", "-json", pkg)
	cmd.Dir = root
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go list %s: %v: %s", pkg, err, errb.String())
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(&out)
	for {
		var p listedPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

// Bundle writes a self-contained Go module for one function under dst: the function's
// files at the root (package handler), every project package it imports copied beneath
// with imports rewritten to openruntimes/handler/..., and go.mod/go.sum pinned to the
// repository's. Tests, other functions and unused packages are left out.
func Bundle(root, function, dst string) error {
	pkgPath := ModulePath + "/functions/" + function
	pkgs, err := goList(root, "./functions/"+function)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	for _, p := range pkgs {
		if p.Standard || !strings.HasPrefix(p.ImportPath, ModulePath+"/") {
			continue
		}
		rel := ""
		if p.ImportPath != pkgPath {
			rel = strings.TrimPrefix(p.ImportPath, ModulePath+"/")
		}
		if rel != "" && isTestDouble(rel) {
			return fmt.Errorf("function %s imports the test double %s", function, p.ImportPath)
		}
		for _, f := range append(append([]string{}, p.GoFiles...), p.EmbedFiles...) {
			src := filepath.Join(p.Dir, f)
			out := filepath.Join(dst, rel, f)
			if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
				return err
			}
			b, err := os.ReadFile(src)
			if err != nil {
				return err
			}
			if strings.HasSuffix(f, ".go") {
				if b, err = rewriteImports(src, b); err != nil {
					return err
				}
			}
			if err := os.WriteFile(out, b, 0o644); err != nil {
				return err
			}
		}
	}
	return writeGoMod(root, dst)
}

func isTestDouble(rel string) bool {
	last := rel[strings.LastIndex(rel, "/")+1:]
	return strings.HasSuffix(last, "test")
}

// rewriteImports maps privateassistant/x imports to openruntimes/handler/x.
func rewriteImports(name string, src []byte) ([]byte, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	ast.Inspect(f, func(n ast.Node) bool {
		is, ok := n.(*ast.ImportSpec)
		if !ok {
			return true
		}
		p, _ := strconv.Unquote(is.Path.Value)
		if strings.HasPrefix(p, ModulePath+"/") {
			is.Path.Value = strconv.Quote(HandlerModule + "/" + strings.TrimPrefix(p, ModulePath+"/"))
		}
		return false
	})
	var buf bytes.Buffer
	if err := format.Node(&buf, fset, f); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

var requireRe = regexp.MustCompile(`(?s)require \((.*?)\)`)

// writeGoMod pins the bundle to the repository's dependency versions.
func writeGoMod(root, dst string) error {
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return err
	}
	var reqs []string
	for _, m := range requireRe.FindAllStringSubmatch(string(mod), -1) {
		for _, line := range strings.Split(m[1], "\n") {
			line = strings.TrimSpace(strings.Split(line, "//")[0])
			if line != "" {
				reqs = append(reqs, "\t"+line)
			}
		}
	}
	gomod := "module " + HandlerModule + "\n\ngo " + GoDirective + "\n\nrequire (\n" + strings.Join(reqs, "\n") + "\n)\n"
	if err := os.WriteFile(filepath.Join(dst, "go.mod"), []byte(gomod), 0o644); err != nil {
		return err
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dst, "go.sum"), sum, 0o644)
}
