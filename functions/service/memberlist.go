package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/appwrite/sdk-for-go/models"
	"github.com/appwrite/sdk-for-go/query"
	"github.com/appwrite/sdk-for-go/users"

	"privateassistant/fault"
	"privateassistant/functions/httpapi"
	"privateassistant/schema"
	"privateassistant/settings"
)

// The admin's lists of people (issue 33 item 5): every account with its role, and the
// pending invitations, each with who invited. A member's JWT gets exactly what a missing
// invitation gets (404 "resource not found") from every route here.

// PersonView is an account in the admin's list of members.
type PersonView struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Email string `json:"email"`
	// Role: "admin", "member", or "none" (signed up but not admitted: Admit makes them a member).
	Role      string `json:"role"`
	JoinedAt  string `json:"joinedAt"`
	InvitedBy string `json:"invitedBy,omitempty"` // the inviting admin's name or email
}

// InvitationView is a pending invitation (its token is never stored, so never shown).
type InvitationView struct {
	ID        string `json:"id"`
	InvitedBy string `json:"invitedBy"`
	InvitedAt string `json:"invitedAt"`
	ExpiresAt string `json:"expiresAt"`
}

// maxAccounts bounds the account list read (a personal deployment has a handful).
const maxAccounts = 2000

func (s *Service) allUsers(ua *users.Users) ([]models.User, error) {
	out := []models.User{}
	cursor := ""
	for len(out) < maxAccounts {
		qs := []string{query.Limit(100)}
		if cursor != "" {
			qs = append(qs, query.CursorAfter(cursor))
		}
		l, err := ua.List(ua.WithListQueries(qs))
		if err != nil {
			return nil, schema.MapError(err)
		}
		out = append(out, l.Users...)
		if len(l.Users) < 100 {
			break
		}
		cursor = l.Users[len(l.Users)-1].Id
	}
	return out, nil
}

func (s *Service) roleOf(labels []string) string {
	switch {
	case slices.Contains(labels, s.cfg.AdminLabel):
		return "admin"
	case slices.Contains(labels, s.cfg.MemberLabel):
		return "member"
	}
	return "none"
}

func displayName(u models.User) string {
	if u.Name != "" {
		return u.Name
	}
	return u.Email
}

// auditPeople records a member action (invitation, sign-up, admission, removal, role).
func auditPeople(ctx context.Context, st *schema.Store, actor, action, target string, detail map[string]any) {
	d, _ := json.Marshal(detail)
	at := time.Now().UTC()
	_, _ = schema.For[schema.Audit](st, schema.CollAudit).Create(ctx, settings.AuditID(fmt.Sprintf("%s/%s/%d", target, action, at.UnixNano()), 0), "",
		&schema.Audit{ActorID: actor, Action: action, Target: target, Detail: schema.Ptr(string(d)), At: at.Format(time.RFC3339Nano)})
}

func (s *Service) peopleRoutes(a *httpapi.API) {
	a.Handle("GET /api/members", httpapi.Route{}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		if err := s.requireAdmin(c, true); err != nil {
			return err
		}
		st, err := s.store(c)
		if err != nil {
			return err
		}
		us, err := s.allUsers(users.New(st.Client()))
		if err != nil {
			return storeErr(err, "account")
		}
		invs, err := schema.For[schema.Invitation](st, schema.CollInvitations).All(r.Context(), schema.ListQuery{
			Filters: []string{query.IsNotNull("redeemedBy")}})
		if err != nil {
			return storeErr(err, "invitation")
		}
		names := map[string]string{}
		for _, u := range us {
			names[u.Id] = displayName(u)
		}
		inviter := map[string]string{}
		for _, inv := range invs {
			inviter[*inv.RedeemedBy] = inv.CreatedBy
		}
		out := make([]PersonView, 0, len(us))
		for _, u := range us {
			p := PersonView{ID: u.Id, Name: u.Name, Email: u.Email, Role: s.roleOf(u.Labels), JoinedAt: u.Registration}
			if by, ok := inviter[u.Id]; ok {
				p.InvitedBy = names[by]
				if p.InvitedBy == "" {
					p.InvitedBy = "a former account"
				}
			}
			out = append(out, p)
		}
		httpapi.WriteJSON(w, 200, map[string]any{"members": out})
		return nil
	})
	a.Handle("GET /api/invitations", httpapi.Route{}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		if err := s.requireAdmin(c, true); err != nil {
			return err
		}
		st, err := s.store(c)
		if err != nil {
			return err
		}
		now := time.Now().UTC()
		invs, err := schema.For[schema.Invitation](st, schema.CollInvitations).All(r.Context(), schema.ListQuery{
			Filters: []string{query.IsNull("redeemedBy"), query.GreaterThan("expiresAt", now.Format(time.RFC3339Nano))}})
		if err != nil {
			return storeErr(err, "invitation")
		}
		ua := users.New(st.Client())
		names := map[string]string{}
		out := make([]InvitationView, 0, len(invs))
		for _, inv := range invs {
			if _, ok := names[inv.CreatedBy]; !ok {
				names[inv.CreatedBy] = "a former account"
				if u, err := ua.Get(inv.CreatedBy); err == nil {
					names[inv.CreatedBy] = displayName(*u)
				}
			}
			out = append(out, InvitationView{ID: inv.ID, InvitedBy: names[inv.CreatedBy], InvitedAt: inv.CreatedAt, ExpiresAt: inv.ExpiresAt})
		}
		sort.Slice(out, func(i, j int) bool { return out[i].InvitedAt > out[j].InvitedAt })
		httpapi.WriteJSON(w, 200, map[string]any{"invitations": out})
		return nil
	})
	// Revoking deletes a pending invitation: its link then reads "not valid". A used one
	// cannot be revoked (remove the member instead).
	a.Handle("DELETE /api/invitations/{id}", httpapi.Route{MaxBody: 1 << 10}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		if err := s.requireAdmin(c, true); err != nil {
			return err
		}
		id, err := pathID(r, "id")
		if err != nil {
			return err
		}
		st, err := s.store(c)
		if err != nil {
			return err
		}
		invs := schema.For[schema.Invitation](st, schema.CollInvitations)
		inv, err := invs.Get(r.Context(), id)
		if errors.Is(err, schema.ErrNotFound) {
			return fault.Missing("resource", nil) // what a member gets
		}
		if err != nil {
			return storeErr(err, "invitation")
		}
		if inv.RedeemedBy != nil {
			return fault.Conflictf("invitation_used", "this invitation was already used; remove the member instead")
		}
		if err := invs.Delete(r.Context(), id); err != nil && !errors.Is(err, schema.ErrNotFound) {
			return storeErr(err, "invitation")
		}
		auditPeople(r.Context(), st, c.User.ID, "invitation.revoke", "invitation/"+id, map[string]any{"expiresAt": inv.ExpiresAt})
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}
