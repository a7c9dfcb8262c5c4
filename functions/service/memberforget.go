package service

import (
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"privateassistant/fault"
	"privateassistant/functions/httpapi"
	"privateassistant/queue"
	"privateassistant/schema"
)

// memberForgetRoute: an admin forgets a person (issue 30 item 6). Everything of theirs
// goes, in an order a repeat can finish: their admission is taken away first (no new
// message), then every conversation is deleted as the web's delete does (runs cancelled,
// messages, attachments and artifacts with their files; late answers dropped; events
// purged once settled), their Hermes home (sessions, memory, skills, files) is queued for
// deletion on every GPU host (queue.PurgeHomesKey, agent/outbox), and the account itself
// is deleted last. The body must repeat the account's email, so a slip of an id cannot
// forget the wrong person. Audited first (member.forget). An admin cannot forget themselves.
func (s *Service) memberForgetRoute(a *httpapi.API) {
	a.Handle("POST /api/members/{id}/forget", httpapi.Route{MaxBody: 1 << 10}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		if err := s.requireAdmin(c, true); err != nil {
			return err
		}
		id, err := pathID(r, "id")
		if err != nil {
			return err
		}
		var in struct {
			Email string `json:"email"`
		}
		if err := httpapi.DecodeJSON(r, &in); err != nil {
			return err
		}
		if id == c.User.ID {
			return fault.Conflictf("own_account", "you cannot forget yourself; another admin can")
		}
		ua, err := s.usersAPI(c)
		if err != nil {
			return err
		}
		u, err := ua.Get(id)
		if err != nil {
			return storeErr(schema.MapError(err), "account")
		}
		if in.Email == "" || in.Email != u.Email {
			return fault.Invalidf("confirm_email", "send {\"email\": \"<the account's email>\"} to confirm whom to forget")
		}
		st, err := s.store(c)
		if err != nil {
			return err
		}
		auditPeople(r.Context(), st, c.User.ID, "member.forget", "member/"+id, map[string]any{"email": u.Email, "name": u.Name})
		// 1. No longer a member: nothing new is admitted for them.
		if _, err := ua.UpdateLabels(id, []string{}); err != nil {
			return usersErr(err)
		}
		// 2. Their conversations, as the web's delete does.
		convs, err := schema.For[schema.Conversation](st, schema.CollConversations).All(r.Context(), schema.ListQuery{Owner: id})
		if err != nil {
			return storeErr(err, "conversation")
		}
		for _, cv := range convs {
			if err := s.deleteConversation(r.Context(), st, id, cv.ID); err != nil {
				return err
			}
		}
		// 3. Their Hermes home on every GPU host.
		if err := s.rdb.ZAdd(r.Context(), queue.PurgeHomesKey, redis.Z{Score: float64(time.Now().UnixMilli()), Member: id}).Err(); err != nil {
			return &fault.Error{Kind: fault.Unavailable, Code: "queue_unavailable", Message: "their agent data cannot be queued for deletion right now; try again", RetryAfter: 2 * time.Second}
		}
		// 4. The account.
		if _, err := ua.Delete(id); err != nil {
			return usersErr(err)
		}
		httpapi.WriteJSON(w, 200, map[string]any{"id": id, "deletedConversations": len(convs)})
		return nil
	})
}
