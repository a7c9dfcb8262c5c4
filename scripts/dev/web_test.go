package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestVendorServedFromNodeModules: every /vendor/* file is the npm package's own file,
// byte for byte (web/ keeps no copy to drift from the pinned version).
func TestVendorServedFromNodeModules(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "web", "vendor"))
	require.True(t, os.IsNotExist(err), "web/vendor must not exist: vendored libraries are mapped onto node_modules")
	s := &Stack{cfg: Config{Root: root}}
	srv := httptest.NewServer(s.web("http://x/v1", "p"))
	defer srv.Close()
	require.Contains(t, vendor, "/vendor/highlight.js")
	for path, file := range vendor {
		want, err := os.ReadFile(filepath.Join(root, "web", file))
		require.NoError(t, err, "run `make deps`")
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, path)
		require.Equal(t, "text/javascript; charset=utf-8", resp.Header.Get("Content-Type"), path)
		require.Equal(t, want, got, path)
	}
}
