package service

import (
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"privateassistant/fault"
	"privateassistant/functions/httpapi"
	"privateassistant/queue"
	"privateassistant/runtimeapi"
	"privateassistant/schema"
)

// forgetRoute: DELETE /api/v1/user deletes what the app made for one of its users, as the
// web's conversation delete does for each of the user's conversations — runs still going
// are cancelled, the messages, artifacts and their files go, the runs' events and records
// go once each has settled (agent/outbox's purge), and the user's Hermes home on every GPU
// host goes (queue.PurgeHomesKey). It is
// for an app user of the app's own namespace only: a user linked to a member is the
// member's, whose conversations are theirs (409 linked_member; an admin unlinks first).
// Audited before anything is deleted. A repeat deletes nothing more and answers 0.
func (s *Service) forgetRoute(a *httpapi.API) {
	a.Handle("DELETE /api/v1/user", httpapi.Route{MaxBody: 1 << 10, RuntimeKey: true}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		rc, err := s.runtimeCaller(r, c)
		if err != nil {
			return err
		}
		if rc.user.Linked {
			return fault.Conflictf("linked_member", "this user is linked to a member: their conversations are theirs; an admin unlinks them first")
		}
		ctx := r.Context()
		if err := s.audit(ctx, rc, runtimeapi.ActionForget, "user/"+rc.user.ID, nil); err != nil {
			return err
		}
		convs, err := schema.For[schema.Conversation](rc.st, schema.CollConversations).All(ctx, schema.ListQuery{Owner: rc.user.ID})
		if err != nil {
			return storeErr(err, "conversation")
		}
		for _, cv := range convs {
			if err := s.deleteConversation(ctx, rc.st, rc.user.ID, cv.ID); err != nil {
				return err
			}
		}
		// Their Hermes home (sessions, memory, files) goes from every GPU host
		// (agent/homes, the agents' retention sweep).
		if err := s.rdb.ZAdd(ctx, queue.PurgeHomesKey, redis.Z{Score: float64(time.Now().UnixMilli()), Member: rc.user.ID}).Err(); err != nil {
			return err
		}
		httpapi.WriteJSON(w, 200, map[string]any{"deletedConversations": len(convs)})
		return nil
	})
}
