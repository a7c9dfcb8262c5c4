package homes_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/homes/homestest"
	"privateassistant/agent/validator"
)

// The members' profile template the tests use turns off every outbound call Hermes makes
// on its own (the check harness validation applies to a deployed template).
func TestTheTemplateIsLocalOnly(t *testing.T) {
	path := homestest.WriteTemplate(t, t.TempDir(), "http://127.0.0.1:1/v1", homestest.Options{})
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var cfg map[string]any
	require.NoError(t, json.Unmarshal(raw, &cfg))
	require.Empty(t, validator.LocalOnlyReasons(cfg))
}
