package service_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionstest"
)

// A run whose request id starts with rt:<app>: was started by that host app and may call
// its tools (apptools, agent/mcpjobs app_tool), so a member cannot send a message with
// such a request id on the web (it would let them call the app's tools).
func TestRuntimeRequestIDsAreReserved(t *testing.T) {
	t.Parallel()
	env := functionstest.New(t)
	_, jwt := env.SignUp(t, "reserved@example.com", "password-reserved")
	conv := env.Conversation(t, jwt)
	res := env.Do(t, "POST", "/api/conversations/"+conv+"/messages", jwt, map[string]any{"requestId": "rt:homeauto:0123", "text": "turn on the lights"})
	require.Equal(t, 400, res.Status, string(res.Body))
	require.Contains(t, string(res.Body), "invalid_request_id")
	ok := env.Do(t, "POST", "/api/conversations/"+conv+"/messages", jwt, map[string]any{"requestId": "web:rt:0123", "text": "hello"})
	require.Equal(t, 202, ok.Status, string(ok.Body))
}
