package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionstest"
	"privateassistant/functions/service"
)

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func run(t *testing.T, dir string, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %v: %s", name, args, out)
}

// TestBundlesBuildLikeTheGoRuntimeAndAnswer packages every function, builds each bundle
// the way Appwrite's Go runtime does (a server module with `replace openruntimes/handler
// => bundle`, `go get openruntimes/handler@v0.0.0`, `go build`), starts it, and calls it
// over HTTP with executor-style headers.
func TestBundlesBuildLikeTheGoRuntimeAndAnswer(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	env := functionstest.New(t)
	_, jwt := env.SignUp(t, "bundle@example.com", "password-bundle")
	calls := map[string][2]string{
		"conversations": {"POST", "/api/conversations"},
		"runs":          {"GET", "/api/runs"},
		"artifacts":     {"GET", "/api/artifacts?runId=r1"},
		"system":        {"GET", "/api/system"},
		"admin":         {"GET", "/api/harnesses"},
		"responses":     {"GET", "/api/v1/responses/resp_r1"},
	}
	// responses: a JWT is not a runtime key (401 invalid_api_key).
	want := map[string]int{"conversations": 201, "runs": 200, "artifacts": 200, "system": 200, "admin": 403, "responses": 401}
	goEnv := []string{"GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local", "CGO_ENABLED=0"}
	for _, fn := range service.Functions {
		t.Run(fn.Name, func(t *testing.T) {
			t.Parallel()
			tmp := t.TempDir()
			bundle := filepath.Join(tmp, "build")
			require.NoError(t, Bundle(root, fn.Name, bundle))
			gomod, err := os.ReadFile(filepath.Join(bundle, "go.mod"))
			require.NoError(t, err)
			require.Contains(t, string(gomod), "module openruntimes/handler")
			require.Contains(t, string(gomod), "go "+GoDirective)
			// No test doubles and no other module path inside the bundle.
			filepath.Walk(bundle, func(p string, info os.FileInfo, err error) error {
				require.NoError(t, err)
				if strings.HasSuffix(p, ".go") {
					b, _ := os.ReadFile(p)
					require.NotContains(t, string(b), `"privateassistant/`, p)
					require.False(t, strings.HasSuffix(p, "_test.go"), p)
				}
				require.NotContains(t, p, "appwritetest")
				require.NotContains(t, p, "redistest")
				return nil
			})
			server := filepath.Join(tmp, "server")
			require.NoError(t, os.MkdirAll(server, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(server, "go.mod"), []byte(serverGoMod(bundle)), 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(server, "main.go"), []byte(runtimeServer), 0o644))
			run(t, server, goEnv, "go", "get", "openruntimes/handler@v0.0.0")
			run(t, server, goEnv, "go", "build", "-ldflags=-s -w", "-o", "server", ".")

			port := freePort(t)
			cmd := exec.Command(filepath.Join(server, "server"))
			cmd.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", port), "OPEN_RUNTIMES_SECRET=opr-secret",
				"APPWRITE_FUNCTION_API_ENDPOINT="+env.TS.URL, "APPWRITE_FUNCTION_PROJECT_ID="+env.TS.Project,
				"PA_REDIS_ADDR="+env.Redis.Addr, "PA_CORS_ORIGINS=http://127.0.0.1:8080")
			var logs bytes.Buffer
			cmd.Stdout, cmd.Stderr = &logs, &logs
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			base := fmt.Sprintf("http://127.0.0.1:%d", port)
			require.Eventually(t, func() bool {
				r, err := http.Get(base + "/__opr/health")
				if err == nil {
					r.Body.Close()
				}
				return err == nil && r.StatusCode == 200
			}, 20*time.Second, 20*time.Millisecond, "server did not start: %s", &logs)

			call := func(method, path, secret string, body io.Reader) (int, string) {
				req, _ := http.NewRequest(method, base+path, body)
				req.Header.Set("x-open-runtimes-secret", secret)
				req.Header.Set("Authorization", "Bearer "+jwt)
				req.Header.Set("x-open-runtimes-timeout", "30")
				req.Header.Set("x-open-runtimes-logging", "disabled")
				req.Header.Set("x-appwrite-key", env.RuntimeKey)
				req.Header.Set("x-appwrite-user-id", "")
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			status, _ := call("GET", "/api/runs", "wrong", nil)
			require.Equal(t, 500, status, "the runtime secret is checked")
			c := calls[fn.Name]
			var body io.Reader
			if c[0] == "POST" {
				body = strings.NewReader(`{"title":"from a bundle"}`)
			}
			status, resp := call(c[0], c[1], "opr-secret", body)
			require.Equal(t, want[fn.Name], status, "%s: %s\nlogs: %s", fn.Name, resp, &logs)
		})
	}
}

func TestRewriteImports(t *testing.T) {
	out, err := rewriteImports("x.go", []byte("package x\n\nimport (\n\t\"fmt\"\n\n\t\"privateassistant/queue\"\n\tq2 \"privateassistant/schema\"\n)\n\nvar _ = fmt.Sprint\nvar _ = queue.TypeRun\nvar _ = q2.CollRuns\n"))
	require.NoError(t, err)
	require.Contains(t, string(out), `"openruntimes/handler/queue"`)
	require.Contains(t, string(out), `q2 "openruntimes/handler/schema"`)
	require.Contains(t, string(out), `"fmt"`)
}
