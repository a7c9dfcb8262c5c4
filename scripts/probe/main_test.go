package main

import (
	"bytes"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/hermes/hermestest"
	"privateassistant/modeltest"
	"privateassistant/schema/appwritetest"
)

func TestProbeReadsOnly(t *testing.T) {
	ts := appwritetest.NewTestServer(t, appwritetest.Options{})
	m := modeltest.New("m")
	ms := httptest.NewServer(m)
	defer ms.Close()
	d, err := hermestest.New(hermestest.Options{APIKey: "probe-key-0123456789abcdef", ModelURL: ms.URL + "/v1", DataDir: t.TempDir()})
	require.NoError(t, err)
	hs := httptest.NewServer(d)
	defer hs.Close()
	t.Setenv("APPWRITE_ENDPOINT", ts.URL)
	t.Setenv("APPWRITE_PROJECT_ID", ts.Project)
	t.Setenv("HERMES_URL", hs.URL)
	t.Setenv("HERMES_API_KEY", "probe-key-0123456789abcdef")
	var out bytes.Buffer
	require.Equal(t, 0, run(&out), out.String())
	require.Contains(t, out.String(), "version 1.9.6")
	require.Contains(t, out.String(), `"durable":true`)
	require.Contains(t, out.String(), "usable")
	require.Zero(t, d.RunsCreated(), "no prompt was sent")
	require.Zero(t, m.Calls(), "no model was called")

	t.Setenv("HERMES_API_KEY", "wrong-key-0123456789abcdef")
	out.Reset()
	require.Equal(t, 1, run(&out))
	require.Contains(t, out.String(), "gateway_auth_failed")
}
