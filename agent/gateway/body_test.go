package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/modeltest"
	"privateassistant/runconfig"
)

var memberDocs = []string{
	`{}`, ` { } `, `{"a":1}`, `{"a":1,"a":2}`, "{\n\t\"model\" :\r \"m\" , \"stream\":true}",
	`{"tools":[{"function":{"name":"read_file"}}],"tools":[{"function":{"name":"terminal"}}]}`,
	`{"tool\u0073":[{"function":{"name":"terminal"}}]}`, `{"tools":[],"tool\u0073":[1]}`,
	`{"a":"x\"}]{[,:\\","b":[{"c":"\\\"","d":["]"]}],"e":{"f":{}}}`,
	`{"é":1,"\ud83d\ude00":[true,false,null,-1.5e3,0]}`,
	`{"k":"\u0022}","n":-0.0E+1,"z":null}`,
	`[]`, `"s"`, `1`, `null`, `true`,
}

// TestObjectMembersReadsWhatADecodeReads: on valid JSON the scan finds exactly the
// members (names unescaped, a later one replacing an earlier one) and values a decode into
// a map does, so the gateway checks what the upstream is sent.
func TestObjectMembersReadsWhatADecodeReads(t *testing.T) {
	docs := append([]string(nil), memberDocs...)
	rng := rand.New(rand.NewSource(1))
	for range 300 {
		docs = append(docs, string(mustJSON(randomValue(rng, 0, true))))
	}
	for _, d := range docs {
		require.True(t, json.Valid([]byte(d)), d)
		checkMembers(t, []byte(d))
	}
}

func checkMembers(t *testing.T, b []byte) {
	t.Helper()
	var want map[string]json.RawMessage
	werr := json.Unmarshal(b, &want)
	got, ok := objectMembers(b)
	if werr != nil || want == nil {
		require.False(t, ok, "%s: not an object, yet read as one", b)
		return
	}
	require.True(t, ok, "%s", b)
	require.Equal(t, len(want), len(got), "%s", b)
	for k, v := range want {
		require.Contains(t, got, k, "%s", b)
		require.Equal(t, string(v), string(got[k]), "%s: member %q", b, k)
	}
}

func randomValue(rng *rand.Rand, depth int, object bool) any {
	strs := []string{"", "a", `"}`, `\`, "]", "{[", "é\u2028", "tools", "\x01", `\"`}
	if object || (depth < 4 && rng.Intn(3) == 0) {
		m := map[string]any{}
		for range rng.Intn(5) {
			m[strs[rng.Intn(len(strs))]+strs[rng.Intn(len(strs))]] = randomValue(rng, depth+1, false)
		}
		return m
	}
	switch rng.Intn(6) {
	case 0:
		var l []any
		for range rng.Intn(4) {
			l = append(l, randomValue(rng, depth+1, false))
		}
		return l
	case 1:
		return rng.NormFloat64() * 1e6
	case 2:
		return rng.Intn(2) == 0
	case 3:
		return nil
	}
	return strs[rng.Intn(len(strs))] + strs[rng.Intn(len(strs))]
}

// FuzzObjectMembers: on any input the scan ends without a panic, and on valid JSON it
// reads what a decode does. The seeds run with go test.
func FuzzObjectMembers(f *testing.F) {
	for _, d := range memberDocs {
		f.Add([]byte(d))
	}
	f.Add([]byte(`{"a":"unterminated`))
	f.Add([]byte(`{"a":[1,2}`))
	f.Add([]byte(`{"a" 1}`))
	f.Add([]byte(`{"a":1}x`))
	f.Add([]byte(`{"a":\`))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = objectMembers(b)
		if json.Valid(b) {
			checkMembers(t, b)
		}
	})
}

// TestASmuggledToolListIsRemoved: a request naming a tool list twice, or under an escaped
// name, is read as a decoder reads it and forwarded as one list the policy checked: the
// tool outside the policy never reaches the model, whichever member a model server would
// keep.
func TestASmuggledToolListIsRemoved(t *testing.T) {
	be := modeltest.New("m")
	be.TokenDelay = 0
	var mu sync.Mutex
	var got []byte
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = b
		mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
		be.ServeHTTP(w, r)
	}))
	defer up.Close()
	gw := httptest.NewServer(&Gateway{APIKey: gatewayKey,
		Routes:  func() map[string]Route { return map[string]Route{"heavy": {Alias: "heavy", Device: "d", Model: "m"}} },
		Devices: map[string]Fence{"d": openFence{endpoint: up.URL + "/v1"}}, Usage: &memSink{},
		Tools: func(context.Context, string) (runconfig.ToolPolicy, error) { return runconfig.ToolPolicy{"file"}, nil }})
	defer gw.Close()
	allowed, forbidden := string(mustJSON(toolDefs("read_file"))), string(mustJSON(toolDefs("terminal")))
	msgs := `"messages":[{"role":"user","content":"hi \"tools\":[]"}]`
	for _, body := range []string{
		`{"model":"heavy@coder",` + msgs + `,"tools":` + forbidden + `,"tools":` + allowed + `}`,
		`{"model":"heavy@coder",` + msgs + `,"tools":` + allowed + `,"tools":` + forbidden + `}`,
		`{"model":"heavy@coder",` + msgs + `,"tools":` + allowed + `,"tool\u0073":` + forbidden + `}`,
		`{"model":"heavy@coder",` + msgs + ` , "tools" :` + allowed + "\n,\t\"tools\"\r:" + forbidden + `}`,
	} {
		req, _ := http.NewRequest("POST", gw.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+gatewayKey)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, body)
		mu.Lock()
		sent := got
		mu.Unlock()
		require.NotContains(t, string(sent), "terminal", "the tool outside the policy reached the model: %s", sent)
		require.LessOrEqual(t, strings.Count(string(sent), `"tools"`), 1, "at most one tool list reaches the model: %s", sent)
		require.Contains(t, string(sent), `"content":"hi \"tools\":[]"`, "the messages are forwarded as they came")
	}
}

// TestAToolListAllowedUnderOnePolicyIsCheckedUnderAnother: the remembered verdicts are
// per policy: the same tool list is removed for a run whose policy does not allow it.
func TestAToolListAllowedUnderOnePolicyIsCheckedUnderAnother(t *testing.T) {
	list := json.RawMessage(mustJSON(toolDefs("read_file", "terminal")))
	body := map[string]json.RawMessage{"tools": list}
	require.Empty(t, restrictTools(body, runconfig.ToolPolicy{"file", "terminal"}))
	require.Equal(t, string(list), string(body["tools"]))
	require.Empty(t, restrictTools(body, runconfig.ToolPolicy{"file", "terminal"}), "remembered")
	body = map[string]json.RawMessage{"tools": list}
	require.Equal(t, []string{"terminal"}, restrictTools(body, runconfig.ToolPolicy{"file"}))
	require.Equal(t, []string{"read_file"}, forwardedTools(t, body))
	body = map[string]json.RawMessage{"tools": list}
	require.Equal(t, []string{"read_file", "terminal"}, restrictTools(body, runconfig.ToolPolicy{}))
	require.NotContains(t, body, "tools")
}

// TestAKeptAliveConnectionTheServerClosedIsNotAnError: a model server that closes a
// kept-alive connection as the next request arrives on it (it read nothing of it, answers
// nothing) costs the caller nothing: the gateway's transport sends the request again on
// a new connection instead of answering 502.
func TestAKeptAliveConnectionTheServerClosedIsNotAnError(t *testing.T) {
	be := modeltest.New("m")
	be.TokenDelay = 0
	var mu sync.Mutex
	served := map[string]int{} // requests per connection
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served[r.RemoteAddr]++
		n := served[r.RemoteAddr]
		mu.Unlock()
		if n == 2 { // the second request on a connection: closed unanswered
			c, _, err := w.(http.Hijacker).Hijack()
			require.NoError(t, err)
			_ = c.Close()
			return
		}
		be.ServeHTTP(w, r)
	}))
	up.Start()
	defer up.Close()
	gw := httptest.NewServer(&Gateway{APIKey: gatewayKey,
		Routes:  func() map[string]Route { return map[string]Route{"heavy": {Alias: "heavy", Device: "d", Model: "m"}} },
		Devices: map[string]Fence{"d": openFence{endpoint: up.URL + "/v1"}}, Usage: &memSink{},
		Tools: func(context.Context, string) (runconfig.ToolPolicy, error) { return runconfig.ToolPolicy{}, nil }})
	defer gw.Close()
	for i := range 4 {
		req, _ := http.NewRequest("POST", gw.URL+"/v1/chat/completions",
			bytes.NewReader(mustJSON(map[string]any{"model": "heavy@r1", "messages": []any{map[string]any{"role": "user", "content": "hi"}}})))
		req.Header.Set("Authorization", "Bearer "+gatewayKey)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, "request %d: %s", i, msg)
	}
}

// FuzzValidJSON: validJSON accepts exactly what json.Valid accepts (it is json.Valid's
// fast path; past 512 levels it answers false and json.Valid decides). The seeds run with go
// test.
func FuzzValidJSON(f *testing.F) {
	for _, d := range memberDocs {
		f.Add([]byte(d))
	}
	for _, d := range []string{`{"a":1}x`, `{"a":01}`, `[1.]`, `[1e]`, `[-]`, `["\x"]`, `["\u12"]`, "[\"\x01\"]", `[tru]`, `[1,]`, `{"a":1,}`,
		`[1 2]`, `{"a" 1}`, `"\ud800"`, `-0.5e-7`, ` [ ] `, `{"a":[{"b":null}]}`, "[\"\xff\"]", `[1E+2, -0, 0.0]`, `{`, `"`, ``} {
		f.Add([]byte(d))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if validJSON(b) {
			require.True(t, json.Valid(b), "%q", b)
		} else if len(b) < 1000 { // never deeper than validJSON reads
			require.False(t, json.Valid(b), "a valid document refused: %q", b)
		}
	})
}

func TestValidJSONReadsValidDocuments(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for range 300 {
		d := mustJSON(randomValue(rng, 0, rng.Intn(2) == 0))
		require.True(t, validJSON(d), "%s", d)
	}
	for _, d := range memberDocs {
		require.True(t, validJSON([]byte(d)), d)
	}
	for _, d := range []string{`{"a":1}x`, `{"a":01}`, `[1.]`, `["\x"]`, "[\"\x01\"]", `[1,]`, `{"a":1,}`, `{`, ``, `[1 2]`} {
		require.False(t, validJSON([]byte(d)), d)
		require.False(t, json.Valid([]byte(d)), d)
	}
}

// TestARemoteRequestIsNeverSentTwice: a remote provider that closes a kept-alive
// connection after it received a request may have worked on (and billed) it, so the
// gateway answers the failure instead of sending the request again.
func TestARemoteRequestIsNeverSentTwice(t *testing.T) {
	be := modeltest.New("m")
	be.TokenDelay = 0
	var mu sync.Mutex
	served := map[string]int{} // requests per connection
	var received int
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served[r.RemoteAddr]++
		n := served[r.RemoteAddr]
		received++
		mu.Unlock()
		if n == 2 { // the second request on a connection: read, then closed unanswered
			c, _, err := w.(http.Hijacker).Hijack()
			require.NoError(t, err)
			_ = c.Close()
			return
		}
		be.ServeHTTP(w, r)
	}))
	defer up.Close()
	gw := httptest.NewServer(&Gateway{APIKey: gatewayKey,
		Routes: func() map[string]Route {
			return map[string]Route{"cloud": {Alias: "cloud", Model: "m", Remote: true, Enabled: true, Endpoint: up.URL + "/v1", Key: "provider-key"}}
		},
		Usage: &memSink{},
		Tools: func(context.Context, string) (runconfig.ToolPolicy, error) { return runconfig.ToolPolicy{}, nil }})
	defer gw.Close()
	var codes []int
	for range 2 {
		req, _ := http.NewRequest("POST", gw.URL+"/v1/chat/completions",
			bytes.NewReader(mustJSON(map[string]any{"model": "cloud@r1", "messages": []any{map[string]any{"role": "user", "content": "hi"}}})))
		req.Header.Set("Authorization", "Bearer "+gatewayKey)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
	require.Equal(t, 200, codes[0])
	require.Equal(t, 502, codes[1], "the dropped request is answered as failed")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 2, received, "the provider received each request once")
}
