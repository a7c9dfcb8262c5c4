package hostapp_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/require"

	"privateassistant/functions/service"
	"privateassistant/queue"
	"privateassistant/runtimeapi"
	"privateassistant/schema"
	"privateassistant/stacktest"
)

// approvalRequest polls the response until it asks for an approval, and returns the item.
func approvalRequest(t *testing.T, c openai.Client, id string) responses.ResponseOutputItemMcpApprovalRequest {
	t.Helper()
	var item responses.ResponseOutputItemMcpApprovalRequest
	var last *responses.Response
	require.Eventually(t, func() bool {
		r, err := c.Responses.Get(context.Background(), id, responses.ResponseGetParams{})
		require.NoError(t, err)
		last = r
		for _, o := range r.Output {
			if o.Type == "mcp_approval_request" {
				// The status turns waiting just before the request is announced: for that
				// moment the item names the request without its command; poll again.
				item = o.AsMcpApprovalRequest()
				return strings.Contains(item.Arguments, `"command":"l`)
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "response %s never asked for an approval (last: %+v)", id, last)
	require.Equal(t, responses.ResponseStatusInProgress, last.Status, "a run waiting for approval is in progress")
	return item
}

// answer sends an mcp_approval_response for the response prev.
func answer(c openai.Client, prev, requestID string, approve bool) (*responses.Response, error) {
	return c.Responses.New(context.Background(), responses.ResponseNewParams{
		PreviousResponseID: openai.String(prev),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMcpApprovalResponse(requestID, approve)}}})
}

// TestAppAnswersAnApproval: a host app's run that asks before a terminal command shows
// the request as OpenAI's mcp_approval_request item, and the app's mcp_approval_response
// (previous_response_id = that response) approves or denies it through the web's path:
// the same run continues, the decision is recorded once, and no other app or user of the
// app can answer it.
func TestAppAnswersAnApproval(t *testing.T) {
	env := stacktest.New(t)
	env.StartAgent(t)
	adminID, adminJWT := env.SignUp(t, "rt-admin3@example.com", "password-rt-admin")
	env.Label(t, adminID, "admin")
	ke := issue(t, env, adminJWT, "appe", []string{"coding"}, 1000)
	kf := issue(t, env, adminJWT, "appf", []string{"coding"}, 1000)
	erin := client(env, ke, "erin")
	ctx := context.Background()

	for _, approve := range []bool{true, false} {
		r := create(t, erin, "coding", "please run #tool", "")
		item := approvalRequest(t, erin, r.ID)
		require.NotEmpty(t, item.ID)
		require.Equal(t, "terminal", item.Name)
		require.Equal(t, service.ApprovalServerLabel, item.ServerLabel)
		var args struct{ Command, Description string }
		require.NoError(t, json.Unmarshal([]byte(item.Arguments), &args), item.Arguments)
		require.Equal(t, "ls -la /tmp", args.Command)

		if approve {
			// Nobody else answers it: another app naming the same user, another user of
			// this app — exactly like a missing response.
			for _, c := range []openai.Client{client(env, kf, "erin"), client(env, ke, "frank")} {
				_, err := answer(c, r.ID, item.ID, true)
				require.Equal(t, 404, status(t, err))
			}
			// Malformed answers admit nothing and decide nothing.
			_, err := erin.Responses.New(ctx, responses.ResponseNewParams{Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
				responses.ResponseInputItemParamOfMcpApprovalResponse(item.ID, true)}}})
			require.Equal(t, 400, status(t, err), "no previous_response_id")
			_, err = erin.Responses.New(ctx, responses.ResponseNewParams{PreviousResponseID: openai.String(r.ID),
				Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
					responses.ResponseInputItemParamOfMcpApprovalResponse(item.ID, true),
					responses.ResponseInputItemParamOfMessage("and also this", responses.EasyInputMessageRoleUser)}}})
			require.Equal(t, 400, status(t, err), "an approval beside a message")
			_, err = answer(erin, r.ID, "not-the-pending-one", true)
			require.Equal(t, 409, status(t, err), "only the pending request")
		}

		got, err := answer(erin, r.ID, item.ID, approve)
		require.NoError(t, err)
		require.Equal(t, r.ID, got.ID, "the answer continues the run that asked; it admits no new one")
		// The same answer again (a retry) is accepted; the other decision is refused.
		_, err = answer(erin, r.ID, item.ID, approve)
		require.NoError(t, err)
		_, err = answer(erin, r.ID, item.ID, !approve)
		require.Equal(t, 409, status(t, err))

		done := poll(t, erin, r.ID, responses.ResponseStatusCompleted)
		for _, o := range done.Output {
			require.NotEqual(t, "mcp_approval_request", o.Type, "a settled response asks nothing")
		}
		require.Contains(t, done.OutputText(), "The directory listing is done.")
		_, err = answer(erin, r.ID, item.ID, approve)
		require.NoError(t, err, "a retry after the run moved on finds the same decision recorded")

		// What the run did with the decision, from its events.
		res := env.Do(t, "GET", "/api/v1/responses/"+r.ID+"/events?wait=0&after=0", "", nil,
			"Authorization", "Bearer "+ke.Secret, "X-App-User", "erin")
		require.Equal(t, 200, res.Status, string(res.Body))
		var b stacktest.Batch
		res.JSON(t, &b)
		var types []string
		for _, ev := range b.Events {
			types = append(types, ev.Type)
			if ev.Type == queue.EventApprovalResponse {
				require.Contains(t, string(ev.Data), map[bool]string{true: `"once"`, false: `"deny"`}[approve])
			}
		}
		require.Contains(t, types, queue.EventApprovalResponse)
		if approve {
			require.Contains(t, types, queue.EventToolStarted)
		} else {
			require.NotContains(t, types, queue.EventToolStarted, "a denied command never runs")
		}
		runs, err := schema.For[schema.Run](env.Store, schema.CollRuns).All(ctx, schema.ListQuery{Owner: runtimeapi.AppUserID("appe", "erin")})
		require.NoError(t, err)
		require.Len(t, runs, map[bool]int{true: 1, false: 2}[approve], "answers admitted no run")
	}

	audit, err := schema.For[schema.Audit](env.Store, schema.CollAudit).All(ctx,
		schema.ListQuery{Filters: []string{query.Equal("actorId", ke.ID)}})
	require.NoError(t, err)
	n := 0
	for _, a := range audit {
		if a.Action == runtimeapi.ActionApprove {
			n++
			require.True(t, strings.HasPrefix(a.Target, "response/resp_"), a.Target)
		}
	}
	require.Equal(t, 9, n, "every answer that named an owned response is audited (the wrong request id, each answer and its retries)")
}
