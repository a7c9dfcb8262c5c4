package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/account"
	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/stretchr/testify/require"

	"privateassistant/schema/appwritetest"
)

// TestTenMinutesOfCLIAndWebUse drives ten minutes of one user's simultaneous CLI and web
// use under Appwrite 1.9.6's abuse limits (the mongodb profile: createJWT 120 per 60 s per
// user, email logins 10 per hour per email) and requires that nothing is ever refused:
//
//   - the CLI: two `pa runs` invocations every second (a script, a watch loop), each a
//     fresh process state over the same config directory, as the shell runs them;
//   - the web, as web/js/auth.js behaves: a JWT minted at page load and kept in memory,
//     replaced after 10 minutes or on a 401; a reload every 30 s; one API call a second.
//
// The API stands in for the functions' authentication: it verifies every bearer JWT
// with the emulator (GET /v1/account with X-Appwrite-JWT), as functions/httpapi does.
// By default the ten minutes are simulated on the emulator's and the CLI's clock (a few
// seconds of real time: part of make test); PA_SIM_REALTIME=1 runs them in real time
// (make load). A CLI that minted a JWT per call hits the limit within the first minute.
func TestTenMinutesOfCLIAndWebUse(t *testing.T) {
	t.Parallel()
	realtime := os.Getenv("PA_SIM_REALTIME") == "1"
	clock := &testClock{t: time.Now()}
	now := clock.Now
	if realtime {
		now = time.Now
	}
	ts := appwritetest.NewTestServer(t, appwritetest.Options{Engine: appwritetest.EngineMongoDB, Now: now})
	admin := appwrite.NewUsers(appwrite.NewClient(appwrite.WithEndpoint(ts.URL), appwrite.WithProject(ts.Project), appwrite.WithKey(ts.AdminKey)))
	_, err := admin.Create("simuser", admin.WithCreateEmail("sim@example.com"), admin.WithCreatePassword("password-sim-1"))
	require.NoError(t, err)

	var refused, verified atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequestWithContext(r.Context(), "GET", ts.URL+"/account", nil)
		req.Header.Set("X-Appwrite-Project", ts.Project)
		req.Header.Set("X-Appwrite-JWT", strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			if resp != nil {
				resp.Body.Close()
			}
			w.WriteHeader(401)
			_, _ = w.Write([]byte(`{"error":{"code":"unauthorized","message":"sign in again"}}`))
			return
		}
		resp.Body.Close()
		verified.Add(1)
		_, _ = w.Write([]byte(`{"runs":[],"next":""}`))
	}))
	t.Cleanup(api.Close)

	dir := filepath.Join(t.TempDir(), "pa")
	pa := func(stdin string, args ...string) (int, string) {
		var out, errw bytes.Buffer
		c := newCLI(strings.NewReader(stdin), &out, &errw)
		c.base, c.endpoint, c.project, c.dir, c.clock = api.URL, ts.URL, ts.Project, dir, now
		return c.exec(context.Background(), args), errw.String()
	}
	code, stderr := pa("password-sim-1\n", "login", "sim@example.com")
	require.Equal(t, 0, code, stderr)

	// The web's session (its cookie) and its in-memory JWT.
	web := newWebClient(t, ts, now)
	call := func(tok string) int {
		req, _ := http.NewRequest("GET", api.URL+"/api/runs", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}

	const seconds = 600
	var tick *time.Ticker
	if realtime {
		tick = time.NewTicker(time.Second)
		defer tick.Stop()
	}
	for s := 0; s < seconds; s++ {
		if realtime {
			<-tick.C
		} else {
			clock.Add(time.Second)
		}
		for i := 0; i < 2; i++ {
			code, stderr := pa("", "runs", "-json")
			if code != 0 {
				refused.Add(1)
				t.Fatalf("second %d: pa runs exited %d: %s", s, code, stderr)
			}
		}
		if s%30 == 0 {
			web.reload()
		}
		tok := web.token(false)
		if call(tok) == 401 {
			tok = web.token(true) // api.js: one refresh of the JWT
			require.Equal(t, 200, call(tok), "second %d", s)
		}
	}
	require.Zero(t, refused.Load())
	require.Zero(t, web.refused, "the web was never refused a JWT")
	require.EqualValues(t, seconds*3, verified.Load(), "every call was let in")
	t.Logf("%d s of use: %d CLI calls, %d web calls, %d JWTs minted by the web, CLI JWT kept in %s", seconds, seconds*2, seconds, web.minted, filepath.Base(dir))
}

// webClient follows web/js/auth.js: a JWT in memory, refreshed after 10 minutes or when
// forced; gone on reload.
type webClient struct {
	t       *testing.T
	acc     *account.Account
	now     func() time.Time
	jwt     string
	at      time.Time
	minted  int
	refused int
}

func newWebClient(t *testing.T, ts *appwritetest.TestServer, now func() time.Time) *webClient {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"email": "sim@example.com", "password": "password-sim-1"})
	req, _ := http.NewRequest("POST", ts.URL+"/account/sessions/email", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Appwrite-Project", ts.Project)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 201, resp.StatusCode)
	secret := ""
	for _, ck := range resp.Cookies() {
		if ck.Name == "a_session_"+ts.Project {
			secret = ck.Value
		}
	}
	require.NotEmpty(t, secret)
	return &webClient{t: t, now: now, acc: appwrite.NewAccount(appwrite.NewClient(appwrite.WithEndpoint(ts.URL), appwrite.WithProject(ts.Project), appwrite.WithSession(secret)))}
}

func (w *webClient) reload() { w.jwt = "" }

func (w *webClient) token(force bool) string {
	if !force && w.jwt != "" && w.now().Sub(w.at) < 10*time.Minute {
		return w.jwt
	}
	j, err := w.acc.CreateJWT()
	if err != nil {
		w.refused++
		w.t.Fatalf("the web could not get a JWT: %v", fmt.Sprint(err))
	}
	w.jwt, w.at = j.Jwt, w.now()
	w.minted++
	return w.jwt
}
