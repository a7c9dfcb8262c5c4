package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/schema/schematest"
)

func TestBootstrapOnceFromTheExampleFile(t *testing.T) {
	env := schematest.New(t)
	t.Setenv("APPWRITE_ENDPOINT", env.TS.URL)
	t.Setenv("APPWRITE_PROJECT_ID", env.TS.Project)
	t.Setenv("APPWRITE_API_KEY", env.RuntimeKey)
	file := filepath.Join("..", "..", "deploy", "bootstrap.example.json")
	require.NoError(t, run(file))
	require.ErrorContains(t, run(file), "already exist")
	require.Error(t, run("missing.json"))
}
