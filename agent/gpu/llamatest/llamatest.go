package llamatest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Server returns the llama-server to test with: $PA_LLAMA_SERVER, else the one
// scripts/llama/fetch.sh put under the repository's .cache/llama. The test is skipped
// with the reason when there is none (or it does not run here).
func Server(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("PA_LLAMA_SERVER")
	if bin == "" {
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err == nil && strings.TrimSpace(string(out)) != "" {
			bin = filepath.Join(filepath.Dir(strings.TrimSpace(string(out))), ".cache", "llama", "llama-server")
		}
	}
	if bin == "" {
		t.Skip("llama-server not available: set PA_LLAMA_SERVER or run scripts/llama/fetch.sh (make deps does)")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("llama-server not available (%s missing): run scripts/llama/fetch.sh (make deps does)", bin)
	}
	if out, err := exec.Command(bin, "--version").CombinedOutput(); err != nil {
		t.Skipf("llama-server at %s does not run here: %v %s", bin, err, out)
	}
	return bin
}
