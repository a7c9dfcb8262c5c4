// Command web-dist writes the production web chat to build/web: web/'s static files, the
// vendored libraries (copied from web/node_modules, as `make dev` serves them; web/ holds
// no copy), and a config.js from the environment (APPWRITE_ENDPOINT, APPWRITE_PROJECT_ID,
// PA_API_BASE). It has no demo section: production never shows a
// demo login and the app never fabricates runs. Serve build/web with any static server.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"privateassistant/internal/dotenv"
)

var vendor = map[string]string{
	"vendor/appwrite.js":  "node_modules/appwrite/dist/iife/sdk.js",
	"vendor/marked.js":    "node_modules/marked/lib/marked.esm.js",
	"vendor/dompurify.js": "node_modules/dompurify/dist/purify.es.mjs",
	"vendor/highlight.js": "node_modules/@highlightjs/cdn-assets/es/highlight.min.js",
	// The licence travels with the one library whose dist file does not carry it.
	"vendor/highlight.LICENSE": "node_modules/@highlightjs/cdn-assets/LICENSE",
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "web-dist:", err)
		os.Exit(1)
	}
}

func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	_, err = io.Copy(out, in)
	return err
}

func run() error {
	_ = dotenv.Load(".env")
	endpoint, project := os.Getenv("APPWRITE_ENDPOINT"), os.Getenv("APPWRITE_PROJECT_ID")
	if endpoint == "" || project == "" {
		return fmt.Errorf("APPWRITE_ENDPOINT and APPWRITE_PROJECT_ID are required")
	}
	dst := filepath.Join("build", "web")
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	err := filepath.Walk("web", func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("web", p)
		if info.IsDir() {
			if rel == "node_modules" || rel == "test" {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasPrefix(rel, "package") {
			return nil
		}
		return copyFile(p, filepath.Join(dst, rel))
	})
	if err != nil {
		return err
	}
	for to, from := range vendor {
		if err := copyFile(filepath.Join("web", from), filepath.Join(dst, to)); err != nil {
			return fmt.Errorf("%s (run `make deps`): %w", from, err)
		}
	}
	cfg, _ := json.Marshal(map[string]any{"endpoint": endpoint, "project": project, "api": os.Getenv("PA_API_BASE")})
	return os.WriteFile(filepath.Join(dst, "config.js"), []byte("window.PA_CONFIG = "+string(cfg)+";\n"), 0o644)
}
