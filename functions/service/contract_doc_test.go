package service_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionstest"
)

// TestRuntimeContractDocument keeps docs/runtime-api.md (the host-app connection
// contract) true: every runtime API endpoint the server registers is documented, and
// every endpoint the document names exists (the stream service's is checked in stream/).
func TestRuntimeContractDocument(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "runtime-api.md"))
	require.NoError(t, err)
	doc := string(b)
	require.Contains(t, doc, "contract v1")
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("`((?:GET|POST|PUT|DELETE|PATCH) /api/v1/[^` ?]*)").FindAllStringSubmatch(doc, -1) {
		documented[m[1]] = true
	}
	env := functionstest.New(t)
	api, err := env.Svc.API("responses")
	require.NoError(t, err)
	var served []string
	for _, r := range api.Routes() {
		if strings.Contains(r.Pattern, " /api/v1/") {
			served = append(served, r.Pattern)
			require.True(t, documented[r.Pattern], "%s is served but not in docs/runtime-api.md", r.Pattern)
		}
	}
	for p := range documented {
		require.True(t, slices.Contains(served, p), "docs/runtime-api.md names %s, which is not served", p)
	}
	for _, h := range []string{"X-App-User", "X-App-User-Token", "X-PA-Token", "X-PA-Signature", "Idempotency-Key", "Retry-After"} {
		require.Contains(t, doc, h)
	}
}
