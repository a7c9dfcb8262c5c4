package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/schema/appwritetest"
	"privateassistant/schema/schematest"
)

func TestRunPlanApplyPlan(t *testing.T) {
	ts := appwritetest.NewTestServer(t, appwritetest.Options{Keys: map[string][]string{"boot-0123456789abcdef": schematest.ProvisionScopes}})
	t.Setenv("APPWRITE_ENDPOINT", ts.URL)
	t.Setenv("APPWRITE_PROJECT_ID", ts.Project)
	t.Setenv("APPWRITE_BOOTSTRAP_KEY", "boot-0123456789abcdef")
	require.NoError(t, run("plan"))
	require.NoError(t, run("apply"))
	require.NoError(t, run("apply"))

	t.Setenv("APPWRITE_BOOTSTRAP_KEY", "wrong")
	require.ErrorContains(t, run("plan"), "")
}
