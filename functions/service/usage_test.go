package service_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionstest"
	"privateassistant/schema"
)

// The run JSON carries what the executor copied from the gateway: tokens and the model
// actually served, in the run (GET /api/runs/{id}) and in the list; the route alias and
// the device stay on the server. A run without usage says null; a harness-only report
// has tokens and model null.
func TestRunJSONCarriesUsageAndModel(t *testing.T) {
	t.Parallel()
	env := functionstest.New(t)
	_, jwt := env.SignUp(t, "usage@example.com", "password-usage")
	conv := env.Conversation(t, jwt)
	a := admitOne(t, env, jwt, conv, "u1")
	b := admitOne(t, env, jwt, env.Conversation(t, jwt), "u2")

	type usage struct {
		InputTokens, OutputTokens, TotalTokens int
		Model                                  *string
		Requests                               *int
	}
	get := func(id string) (*usage, map[string]json.RawMessage) {
		res := env.Do(t, "GET", "/api/runs/"+id, jwt, nil)
		require.Equal(t, 200, res.Status, string(res.Body))
		var v struct{ Usage *usage }
		res.JSON(t, &v)
		var raw map[string]json.RawMessage
		res.JSON(t, &raw)
		return v.Usage, raw
	}
	u, raw := get(a.RunID)
	require.Nil(t, u)
	require.JSONEq(t, "null", string(raw["usage"]))

	_, err := schema.For[schema.Run](env.Store, schema.CollRuns).Update(context.Background(), a.RunID, map[string]any{
		"usage": `{"inputTokens":2500,"outputTokens":200,"totalTokens":2700,"model":"qwen3-30b-a3b-q8","alias":"work","device":"xtx","requests":2,"source":"gateway"}`})
	require.NoError(t, err)
	_, err = schema.For[schema.Run](env.Store, schema.CollRuns).Update(context.Background(), b.RunID, map[string]any{
		"usage": `{"inputTokens":5,"outputTokens":2,"totalTokens":7}`})
	require.NoError(t, err)

	u, raw = get(a.RunID)
	require.NotNil(t, u)
	require.Equal(t, 2700, u.TotalTokens)
	require.Equal(t, 2500, u.InputTokens)
	require.Equal(t, 200, u.OutputTokens)
	require.NotNil(t, u.Model)
	require.Equal(t, "qwen3-30b-a3b-q8", *u.Model)
	require.NotNil(t, u.Requests)
	require.Equal(t, 2, *u.Requests)
	require.NotContains(t, string(raw["usage"]), "xtx")
	require.NotContains(t, string(raw["usage"]), "alias")

	u, raw = get(b.RunID)
	require.Equal(t, 7, u.TotalTokens)
	require.Nil(t, u.Model)
	require.Contains(t, string(raw["usage"]), `"model":null`)

	res := env.Do(t, "GET", "/api/runs?limit=100&conversationId="+conv, jwt, nil)
	require.Equal(t, 200, res.Status, string(res.Body))
	var list struct {
		Runs []struct {
			ID    string
			Usage *usage
		}
	}
	res.JSON(t, &list)
	found := false
	for _, r := range list.Runs {
		if r.ID == a.RunID {
			found = true
			require.NotNil(t, r.Usage)
			require.Equal(t, "qwen3-30b-a3b-q8", *r.Usage.Model)
		}
	}
	require.True(t, found, string(res.Body))
}
