// Command package writes a self-contained bundle per Appwrite Function under
// build/functions/<name>/ (docs/design/layout.md, "Deploying a Go function"): Appwrite's Go runtime
// builds a function folder as module openruntimes/handler inside its own server module,
// so the project packages a function imports are copied into the bundle with their
// imports rewritten, and go.mod/go.sum are pinned to this repository's.
//
//	go run ./scripts/package            # all functions
//	go run ./scripts/package runs       # one
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"privateassistant/functions/service"
)

func main() {
	root, _ := os.Getwd()
	names := os.Args[1:]
	if len(names) == 0 {
		for _, f := range service.Functions {
			names = append(names, f.Name)
		}
	}
	for _, n := range names {
		dst := filepath.Join(root, "build", "functions", n)
		if err := Bundle(root, n, dst); err != nil {
			fmt.Fprintln(os.Stderr, "package:", err)
			os.Exit(1)
		}
		fmt.Println("packaged", n, "→", dst)
	}
}
