package gpu

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// running reports whether pid is a live process (not gone, not a zombie waiting to be
// reaped).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state …: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// TestModelServersDieWithTheAgent: an agent killed without a chance to stop (SIGKILL, a
// crash, the OOM killer) takes its process backend's model servers with it. The next
// agent does not adopt them, so a server left running would hold its model's VRAM beside
// the one the next agent starts. The agent here is this test binary again
// (TestHelperAgentLoadsAndHangs), killed with SIGKILL once its model is loaded.
func TestModelServersDieWithTheAgent(t *testing.T) {
	bin := scriptedModel(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperAgentLoadsAndHangs$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PA_TEST_HELPER_AGENT=1", "PA_TEST_MODEL_BIN="+bin)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := 0
	sc := bufio.NewScanner(out)
	for pid == 0 && sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "model-server-pid "); ok {
			pid, err = strconv.Atoi(v)
			require.NoError(t, err)
		}
	}
	require.NotZero(t, pid, "the helper agent never loaded its model: %v", sc.Err())
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	require.True(t, running(pid))

	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	require.Eventually(t, func() bool { return !running(pid) }, 10*time.Second, 10*time.Millisecond,
		"the model server %d outlived the agent that started it", pid)
}

// TestHelperAgentLoadsAndHangs is the agent of TestModelServersDieWithTheAgent: it loads
// a model through a process backend, prints the server's pid, and waits to be killed.
func TestHelperAgentLoadsAndHangs(t *testing.T) {
	if os.Getenv("PA_TEST_HELPER_AGENT") != "1" {
		t.Skip("the helper of TestModelServersDieWithTheAgent")
	}
	bin := os.Getenv("PA_TEST_MODEL_BIN")
	b := &ProcessBackend{
		Command: func(model string, port int) []string {
			return []string{bin, "-addr", "127.0.0.1:" + strconv.Itoa(port), "-model", model, "-context", "32768"}
		},
		Env: []string{"GATEWAY_API_KEY=" + testKey}, APIKey: testKey,
	}
	_, err := b.Load(context.Background(), "small")
	require.NoError(t, err)
	b.mu.Lock()
	pid := b.procs["small"].cmd.Process.Pid
	b.mu.Unlock()
	fmt.Printf("model-server-pid %d\n", pid)
	select {} // until killed
}
