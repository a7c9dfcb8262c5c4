package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// vendor maps the web chat's browser dependencies to files npm installed (no build step).
var vendor = map[string]string{
	"/vendor/appwrite.js":  "node_modules/appwrite/dist/iife/sdk.js",
	"/vendor/marked.js":    "node_modules/marked/lib/marked.esm.js",
	"/vendor/dompurify.js": "node_modules/dompurify/dist/purify.es.mjs",
	"/vendor/highlight.js": "node_modules/@highlightjs/cdn-assets/es/highlight.min.js",
}

// web serves web/ as static files, the vendored libraries, and config.js. This is the
// demo entry point: its config names the demo login. Production serves web/ with a
// config.js of its own (`make web-dist`), which has no demo section.
func (s *Stack) web(endpoint, project string) http.Handler {
	root := filepath.Join(s.cfg.Root, "web")
	files := http.FileServer(noListing{http.Dir(root)})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		switch {
		case p == "/config.js":
			cfg, _ := json.Marshal(map[string]any{"endpoint": endpoint, "project": project, "api": "",
				"demo": map[string]string{"email": s.DemoEmail, "password": s.DemoPass}})
			w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
			w.Header().Set("Cache-Control", "no-store")
			_, _ = w.Write([]byte("window.PA_CONFIG = " + string(cfg) + ";\n"))
			return
		case vendor[p] != "":
			w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
			http.ServeFile(w, r, filepath.Join(root, vendor[p]))
			return
		case strings.HasPrefix(p, "/node_modules") || strings.HasPrefix(p, "/test") || strings.HasPrefix(p, "/package"):
			http.NotFound(w, r)
			return
		case strings.HasPrefix(p, "/c/"):
			// A link to a conversation (/c/<id>) is the app's page; the app opens it.
			r = r.Clone(r.Context())
			r.URL.Path = "/"
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", csp)
		w.Header().Set("Referrer-Policy", "no-referrer")
		if p == "/sw.js" {
			w.Header().Set("Cache-Control", "no-cache")
		}
		files.ServeHTTP(w, r)
	})
}

// csp allows only this origin's scripts (no inline script), and connections to this origin.
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"

// noListing serves files only: a folder without an index.html is "not found" instead of
// a listing of what it holds.
type noListing struct{ fs http.FileSystem }

func (n noListing) Open(name string) (http.File, error) {
	f, err := n.fs.Open(name)
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err == nil && st.IsDir() {
		idx, err := n.fs.Open(strings.TrimSuffix(name, "/") + "/index.html")
		if err != nil {
			f.Close()
			return nil, os.ErrNotExist
		}
		idx.Close()
	}
	return f, nil
}
