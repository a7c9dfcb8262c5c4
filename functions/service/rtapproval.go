package service

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"privateassistant/control"
	"privateassistant/fault"
	"privateassistant/functions/httpapi"
	"privateassistant/queue"
	"privateassistant/runtimeapi"
	"privateassistant/schema"
)

// Approvals through the runtime API follow OpenAI's MCP approval items. While a run waits
// for approval, its response (still in_progress) carries an output item
// {"type": "mcp_approval_request", "id": <the pending request id>, "name": "terminal",
// "server_label": ApprovalServerLabel, "arguments": "{\"command\": …, \"description\": …}"}.
// The app answers with a create whose previous_response_id is that response and whose only
// input item is {"type": "mcp_approval_response", "approval_request_id": <id>, "approve":
// true|false}. The decision goes through the web's path (control.Controller.Approve:
// owner-checked, exact request id, recorded once); approve maps to "once", false to "deny".
// Unlike OpenAI, the answer admits no new run: the run that asked continues, so the create
// answers with that same response, read back after the decision.

// ApprovalServerLabel names the assistant's own tools in an mcp_approval_request.
const ApprovalServerLabel = "private-assistant"

// approvalAnswer is an mcp_approval_response input item.
type approvalAnswer struct {
	RequestID string
	Approve   bool
}

// approvalInput reads input as one mcp_approval_response item. ok is false when input
// holds no such item (a message create); an approval item beside anything else is refused.
func approvalInput(raw json.RawMessage) (ans approvalAnswer, ok bool, err error) {
	var items []map[string]json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return ans, false, nil
	}
	n := 0
	for _, it := range items {
		var typ string
		_ = json.Unmarshal(it["type"], &typ)
		if typ == "mcp_approval_response" {
			n++
		}
	}
	if n == 0 {
		return ans, false, nil
	}
	if len(items) != 1 {
		return ans, true, fault.Invalidf("invalid_input", "an mcp_approval_response must be the only input item")
	}
	var it struct {
		RequestID string `json:"approval_request_id"`
		Approve   *bool  `json:"approve"`
	}
	b, _ := json.Marshal(items[0])
	if json.Unmarshal(b, &it) != nil || it.RequestID == "" || len(it.RequestID) > 256 {
		return ans, true, fault.Invalidf("invalid_request_id", "approval_request_id must be the pending approval's id")
	}
	if it.Approve == nil {
		return ans, true, fault.Invalidf("invalid_choice", "approve must be true or false")
	}
	return approvalAnswer{RequestID: it.RequestID, Approve: *it.Approve}, true, nil
}

// answerApproval records an app's decision on the approval its previous response asked for.
func (s *Service) answerApproval(w http.ResponseWriter, r *http.Request, rc *rtCall, body createBody, ans approvalAnswer) error {
	if body.PreviousResponseID == "" {
		return fault.Invalidf("previous_response_id_required", "an approval answers the response that asked for it: send that response's id as previous_response_id")
	}
	ctx := r.Context()
	run, err := s.usedResponse(ctx, rc, body.PreviousResponseID, runtimeapi.ActionApprove)
	if err != nil {
		return err
	}
	if body.Model != "" && body.Model != run.Role {
		return fault.Invalidf("invalid_model", "model must be the role of the response the approval answers (%q), or omitted", run.Role)
	}
	choice := "deny"
	if ans.Approve {
		choice = "once"
	}
	err = s.controller().Approve(ctx, rc.st, rc.user.ID, run.ID, ans.RequestID, choice)
	if errors.Is(err, control.ErrApprovalNotPending) || errors.Is(err, control.ErrApprovalMismatch) {
		// A retried answer after the run moved on (its status, or first its binding, no
		// longer names the request): the same decision, already recorded, is accepted.
		if got, gerr := s.rdb.Get(ctx, queue.ApprovalKey(run.ID, ans.RequestID)).Result(); gerr == nil && got == choice {
			err = nil
		}
	}
	if err != nil {
		return storeErr(err, "response")
	}
	if run, err = s.ownedResponse(ctx, rc, ResponseIDPrefix+run.ID); err != nil {
		return err
	}
	obj, err := s.responseObject(ctx, rc, run)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, 200, obj)
	return nil
}

// approvalRequestItem is the output item of a run waiting for approval: the pending
// request (the binding's id), its command and description from the run's newest events.
// nil when the run no longer waits for one.
func (s *Service) approvalRequestItem(ctx context.Context, rc *rtCall, run *schema.Run) (map[string]any, error) {
	bind, err := schema.For[schema.RunBinding](rc.st, schema.CollRunBindings).Get(ctx, run.ID)
	if errors.Is(err, schema.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, storeErr(err, "response")
	}
	if bind.PendingApprovalID == nil || *bind.PendingApprovalID == "" {
		return nil, nil
	}
	reqID := *bind.PendingApprovalID
	args := queue.ApprovalRequestData{RequestID: reqID}
	// The request is among the newest events while the run waits (the status turns
	// waiting_for_approval just before it is announced); without them the item still names
	// the request, which is all an answer needs.
	if evs, err := queue.LatestEvents(ctx, s.rdb, run.ID, 64); err == nil {
		for _, ev := range evs {
			var d queue.ApprovalRequestData
			if ev.Type == queue.EventApprovalRequest && json.Unmarshal(ev.Data, &d) == nil && d.RequestID == reqID {
				args = d
				break
			}
		}
	}
	a, _ := json.Marshal(map[string]string{"command": args.Command, "description": args.Description})
	return map[string]any{"type": "mcp_approval_request", "id": reqID, "name": "terminal",
		"server_label": ApprovalServerLabel, "arguments": string(a)}, nil
}
