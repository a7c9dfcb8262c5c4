package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/gpu"
)

// TestGatewayCutsRevokedRequest: a streamed request in flight when its run's grant is
// taken back (here: the run stopped renewing it) is cut upstream; nothing more is served
// under the stale grant.
func TestGatewayCutsRevokedRequest(t *testing.T) {
	cut := make(chan struct{})
	first := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Stream bool }
		_ = json.NewDecoder(r.Body).Decode(&req)
		if !req.Stream { // readiness: a one-token completion
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"model":"m","choices":[{"message":{"role":"assistant","content":"x"}}]}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for i := 0; ; i++ {
			fmt.Fprintf(w, "data: {\"model\":\"m\",\"choices\":[{\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
			fl.Flush()
			if i == 0 {
				close(first)
			}
			select {
			case <-r.Context().Done():
				close(cut)
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}))
	defer up.Close()
	mgr := gpu.NewManager(gpu.Device{Name: "d", Backend: &gpu.UpstreamBackend{URL: up.URL + "/v1"}, GrantTTL: 300 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, mgr.Start(ctx))
	defer mgr.Stop()
	gw := httptest.NewServer(&Gateway{APIKey: gatewayKey, Devices: map[string]Fence{"d": mgr},
		Routes: func() map[string]Route { return map[string]Route{"r": {Alias: "r", Device: "d", Model: "m"}} }})
	defer gw.Close()

	g, err := mgr.AcquireFor(ctx, "run-s", "m", nil)
	require.NoError(t, err)
	defer g.Release()
	require.NoError(t, g.Renew()) // beats once, then stops

	req, _ := http.NewRequestWithContext(ctx, "POST", gw.URL+"/runs/run-s/v1/chat/completions",
		bytes.NewReader(mustJSON(map[string]any{"model": "r", "stream": true, "messages": []any{}})))
	req.Header.Set("Authorization", "Bearer "+gatewayKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	<-first
	select {
	case <-g.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the grant did not expire")
	}
	select {
	case <-cut:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream call went on under a revoked grant")
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() { // the stream to the caller ends too
		require.True(t, strings.HasPrefix(sc.Text(), "data: ") || sc.Text() == "")
	}
}
