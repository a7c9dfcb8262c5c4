package service_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/stretchr/testify/require"

	"privateassistant/apptools"
	"privateassistant/functions/functionstest"
	"privateassistant/functions/service"
	"privateassistant/schema"
)

// A host app declares its tools with its runtime key: a callback off the admin's
// allow-list is refused, the first declaration answers the signing secret once, the tools
// are the key's app's (the body cannot name another app), and a call without a key is 401.
func TestHostAppDeclaresToolsWithItsKey(t *testing.T) {
	t.Parallel()
	env := functionstest.New(t, functionstest.Options{Mutate: func(c *service.Config) {
		c.AppCallbackAllow = "https://home.example.com/pa/"
	}})
	adminID, admin := env.SignUp(t, "apptools-admin@example.com", "password-apptools")
	env.Label(t, adminID, "member", "admin")
	res := env.Do(t, "POST", "/api/runtime-keys", admin, map[string]any{"appId": "homeauto", "roles": []string{"chat"}, "rateLimit": 100, "rateWindowSeconds": 60})
	require.Equal(t, 201, res.Status, string(res.Body))
	var key struct{ Secret string }
	res.JSON(t, &key)

	lights := map[string]any{"name": "turn_on_lights", "description": "Turn on the lights in a room.",
		"schema":      map[string]any{"type": "object", "properties": map[string]any{"room": map[string]any{"type": "string"}}, "required": []string{"room"}},
		"callbackUrl": "https://home.example.com/pa/lights", "app": "another-app"}
	off := map[string]any{"name": "open_door", "description": "Open the door.", "schema": map[string]any{"type": "object"},
		"callbackUrl": "https://attacker.example.net/pa/door"}

	require.Equal(t, 401, env.Do(t, "PUT", "/api/v1/tools", "", map[string]any{"tools": []any{lights}}).Status)
	res = env.Do(t, "PUT", "/api/v1/tools", key.Secret, map[string]any{"tools": []any{lights, off}})
	require.Equal(t, 400, res.Status, string(res.Body))
	require.Contains(t, string(res.Body), "callback_not_allowed")

	res = env.Do(t, "PUT", "/api/v1/tools", key.Secret, map[string]any{"tools": []any{lights}})
	require.Equal(t, 200, res.Status, string(res.Body))
	var out struct {
		Tools         []apptools.Tool
		SigningSecret string
	}
	res.JSON(t, &out)
	require.NotEmpty(t, out.SigningSecret, "shown at the first declaration")
	require.Len(t, out.Tools, 1)
	require.Equal(t, "homeauto", out.Tools[0].App, "the key names the app, not the body")

	res = env.Do(t, "PUT", "/api/v1/tools", key.Secret, map[string]any{"tools": []any{lights}})
	require.Equal(t, 200, res.Status, string(res.Body))
	var again map[string]json.RawMessage
	res.JSON(t, &again)
	require.NotContains(t, again, "signingSecret", "shown once")

	rdb := env.Redis.Client()
	defer rdb.Close()
	got, err := (&apptools.Registry{RDB: rdb}).Secret(context.Background(), "homeauto")
	require.NoError(t, err)
	require.Equal(t, out.SigningSecret, string(got), "the agent signs with the secret the app was given")
	res = env.Do(t, "GET", "/api/v1/tools", key.Secret, nil)
	require.Equal(t, 200, res.Status, string(res.Body))
	require.Contains(t, string(res.Body), "turn_on_lights")

	// The app rotates its signing secret (a leaked one): the new one is answered once and
	// is what the agent signs with from then on; another app's key rotates only its own.
	require.Equal(t, 401, env.Do(t, "POST", "/api/v1/tools/signing-secret", "", nil).Status)
	res = env.Do(t, "POST", "/api/v1/tools/signing-secret", key.Secret, nil)
	require.Equal(t, 200, res.Status, string(res.Body))
	var rotated struct{ SigningSecret string }
	res.JSON(t, &rotated)
	require.NotEmpty(t, rotated.SigningSecret)
	require.NotEqual(t, out.SigningSecret, rotated.SigningSecret)
	got, err = (&apptools.Registry{RDB: rdb}).Secret(context.Background(), "homeauto")
	require.NoError(t, err)
	require.Equal(t, rotated.SigningSecret, string(got))
	res = env.Do(t, "POST", "/api/runtime-keys", admin, map[string]any{"appId": "otherapp", "roles": []string{"chat"}, "rateLimit": 100, "rateWindowSeconds": 60})
	require.Equal(t, 201, res.Status, string(res.Body))
	var other struct{ ID, Secret string }
	res.JSON(t, &other)
	res = env.Do(t, "POST", "/api/v1/tools/signing-secret", other.Secret, nil)
	require.Equal(t, 200, res.Status, string(res.Body))
	got, err = (&apptools.Registry{RDB: rdb}).Secret(context.Background(), "homeauto")
	require.NoError(t, err)
	require.Equal(t, rotated.SigningSecret, string(got), "another app's rotation leaves this app's secret alone")
	audit, err := schema.For[schema.Audit](env.Store, schema.CollAudit).All(context.Background(),
		schema.ListQuery{Filters: []string{query.Equal("action", "runtime.tools.rotate_secret")}})
	require.NoError(t, err)
	require.Len(t, audit, 2, "each rotation is audited under its key")
	for _, a := range audit {
		if a.Detail != nil {
			require.NotContains(t, *a.Detail, rotated.SigningSecret)
		}
	}
}
