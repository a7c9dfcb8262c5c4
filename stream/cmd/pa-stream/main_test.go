package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"privateassistant/queue/redistest"
	"privateassistant/schema/appwritetest"
	"privateassistant/stream"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// The binary reads its settings from the environment, serves /stream/ and its ops
// listener (ready with Redis and Appwrite up), refuses an unauthenticated stream as the
// functions do, and exits 0 on SIGTERM.
func TestBinaryServesAndStopsOnSIGTERM(t *testing.T) {
	ts := appwritetest.NewTestServer(t, appwritetest.Options{Keys: map[string][]string{"stream-key-0123456789": stream.Scopes}})
	r := redistest.Start(t)
	bin := filepath.Join(t.TempDir(), "pa-stream")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	addr, ops := freeAddr(t), freeAddr(t)
	cmd := exec.Command(bin)
	cmd.Dir = t.TempDir() // no .env there
	cmd.Env = append(os.Environ(), "PA_STREAM_ADDR="+addr, "PA_STREAM_OPS_ADDR="+ops, "PA_STREAM_APPWRITE_ENDPOINT="+ts.URL,
		"PA_STREAM_APPWRITE_PROJECT_ID="+ts.Project, "PA_STREAM_APPWRITE_KEY=stream-key-0123456789", "PA_REDIS_ADDR="+r.Addr,
		"PA_REDIS_USERNAME=default")
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	require.Eventually(t, func() bool { c, _ := get("http://" + ops + "/readyz"); return c == 200 }, 20*time.Second, 20*time.Millisecond)
	code, body := get("http://" + addr + "/stream/feed")
	require.Equal(t, 401, code, body)
	require.Contains(t, body, `"unauthenticated"`)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	select {
	case err := <-exited:
		require.NoError(t, err, "exit 0")
	case <-ctx.Done():
		t.Fatal("pa-stream did not stop on SIGTERM")
	}
}
