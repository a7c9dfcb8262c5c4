package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionhost"
	"privateassistant/schema/appwritejson"
)

func TestCommittedFileIsInSyncAndValid(t *testing.T) {
	want, err := generate()
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join("..", "..", "appwrite.json"))
	require.NoError(t, err, "appwrite.json must be committed")
	require.Equal(t, string(want), string(got), "appwrite.json is out of date: run `make appwrite-json`")
	require.NoError(t, appwritejson.Validate(got))
}

func TestValidatorIsStrict(t *testing.T) {
	good, err := generate()
	require.NoError(t, err)
	for name, mutate := range map[string]func(string) string{
		"unknown top key":   func(s string) string { return strings.Replace(s, `"projectId"`, `"bogus": 1, "projectId"`, 1) },
		"missing projectId": func(s string) string { return strings.Replace(s, `"projectId"`, `"projectIdX"`, 1) },
		"unknown attribute key": func(s string) string {
			return strings.Replace(s, `"key": "ownerId"`, `"key": "ownerId", "unique": true`, 1)
		},
		"bad attribute type": func(s string) string { return strings.Replace(s, `"type": "integer"`, `"type": "int"`, 1) },
		"specification on a function": func(s string) string {
			return strings.Replace(s, `"functions": [`, `"functions": [{"$id":"f","name":"f","runtime":"go-1.26","specification":"s-1vcpu-512mb"},`, 1)
		},
		"unknown bucket key": func(s string) string {
			return strings.Replace(s, `"fileSecurity": true`, `"fileSecurity": true, "transformations": true`, 1)
		},
	} {
		bad := mutate(string(good))
		require.NotEqual(t, string(good), bad, name)
		require.Error(t, appwritejson.Validate([]byte(bad)), name)
	}
	require.ErrorContains(t, appwritejson.Validate([]byte(strings.Replace(string(good), `"functions": [`,
		`"functions": [{"$id":"f","name":"f","runtime":"go-1.26","specification":"x"},`, 1))), "buildSpecification")
	require.ErrorContains(t, appwritejson.Validate([]byte(strings.Replace(string(good), `"runtime": "go-1.26"`, `"runtimeX": "go-1.26"`, 1))), "missing required key \"runtime\"")
}

// TestSchedulesAreCron: every function's schedule is one Appwrite's Cron validator accepts
// (the admin function's runs the reconciler's pass).
func TestSchedulesAreCron(t *testing.T) {
	n := 0
	for _, f := range functions() {
		if f.Schedule == "" {
			continue
		}
		n++
		_, err := functionhost.ParseSchedule(f.Schedule)
		require.NoError(t, err, f.ID)
	}
	require.Positive(t, n, "the admin function has a schedule")
}
