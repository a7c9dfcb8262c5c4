package service

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/mail"
	"slices"
	"sort"
	"time"
	"unicode/utf8"

	"github.com/appwrite/sdk-for-go/users"

	"privateassistant/fault"
	"privateassistant/functions/httpapi"
	"privateassistant/runconfig"
	"privateassistant/schema"
)

// Membership (closed by default). A verified Appwrite user may use the product only when
// they carry the member label (PA_MEMBER_LABEL, default "member") or the admin label.
// Labels are set only through the Users API with a server key (a user cannot set their
// own), they arrive with the account the JWT check already reads (no extra call per
// request), and only the admin function's key has the users.* scopes. An account made
// through Appwrite's public sign-up has no label and gets 403 not_a_member everywhere.

// isMember is the gate every authenticated route (but /api/me) passes.
func (s *Service) isMember(u httpapi.User) bool {
	return IsMember(u, s.cfg.MemberLabel, s.cfg.AdminLabel)
}

// IsMember is the member gate: a verified user with the member or the admin label (the
// stream service applies the same gate).
func IsMember(u httpapi.User, memberLabel, adminLabel string) bool {
	return u.HasLabel(memberLabel) || u.HasLabel(adminLabel)
}

// RoleView is a work role the caller may use.
type RoleView struct {
	Name  string   `json:"name"`
	Tools []string `json:"tools"`
}

// allowedRoles lists the roles of the current settings whose labels admit the caller.
func (s *Service) allowedRoles(ctx context.Context, st *schema.Store, labels []string) ([]RoleView, error) {
	set, err := schema.For[schema.Settings](st, schema.CollSettings).Get(ctx, runconfig.SystemSettingsID)
	if errors.Is(err, schema.ErrNotFound) {
		return []RoleView{}, nil
	}
	if err != nil {
		return nil, err
	}
	roles := map[string]runconfig.RoleBinding{}
	if set.Roles != nil {
		_ = json.Unmarshal([]byte(*set.Roles), &roles)
	}
	var ceiling []string
	if set.ToolCeiling != nil {
		_ = json.Unmarshal([]byte(*set.ToolCeiling), &ceiling)
	}
	out := []RoleView{}
	for name, b := range roles {
		if runconfig.Allowed(b.Labels, labels) {
			out = append(out, RoleView{Name: name, Tools: runconfig.EffectiveTools(ceiling, b.Tools)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (s *Service) memberRoutes(a *httpapi.API) {
	// Who am I: the one route a verified non-member reaches, so a client can say why
	// nothing else answers.
	a.Handle("GET /api/me", httpapi.Route{AnyUser: true}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		body := map[string]any{"id": c.User.ID, "email": c.User.Email, "name": c.User.Name,
			"member": s.isMember(c.User), "admin": c.User.HasLabel(s.cfg.AdminLabel), "roles": []RoleView{}}
		if s.isMember(c.User) {
			st, err := s.store(c)
			if err != nil {
				return err
			}
			roles, err := s.allowedRoles(r.Context(), st, c.User.Labels)
			if err != nil {
				return storeErr(err, "settings")
			}
			body["roles"] = roles
		}
		httpapi.WriteJSON(w, 200, body)
		return nil
	})
	// The roles the caller may use (clients offer only these).
	a.Handle("GET /api/roles", httpapi.Route{}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		st, err := s.store(c)
		if err != nil {
			return err
		}
		roles, err := s.allowedRoles(r.Context(), st, c.User.Labels)
		if err != nil {
			return storeErr(err, "settings")
		}
		httpapi.WriteJSON(w, 200, map[string]any{"roles": roles})
		return nil
	})
}

// MemberView is an account as the admin API shows it.
type MemberView struct {
	ID     string   `json:"id"`
	Email  string   `json:"email"`
	Name   string   `json:"name"`
	Labels []string `json:"labels"`
	Member bool     `json:"member"`
}

func (s *Service) usersAPI(c *httpapi.Call) (*users.Users, error) {
	st, err := s.store(c)
	if err != nil {
		return nil, err
	}
	return users.New(st.Client()), nil
}

type accountInput struct {
	Email    string `json:"email"`
	Password string `json:"password"`
	Name     string `json:"name"`
}

func (in accountInput) validate() error {
	if a, err := mail.ParseAddress(in.Email); err != nil || a.Address != in.Email || len(in.Email) > 320 {
		return fault.Invalidf("invalid_email", "email must be a plain email address")
	}
	if n := utf8.RuneCountInString(in.Password); n < 8 || n > 256 {
		return fault.Invalidf("invalid_password", "password must be 8-256 characters")
	}
	if !utf8.ValidString(in.Name) || utf8.RuneCountInString(in.Name) > 128 {
		return fault.Invalidf("invalid_name", "name must be at most 128 characters")
	}
	return nil
}

func usersErr(err error) error {
	err = schema.MapError(err)
	switch {
	case errors.Is(err, schema.ErrConflict):
		return fault.Conflictf("account_exists", "an account with this email already exists")
	case errors.Is(err, schema.ErrInvalid):
		return fault.Invalidf("invalid_account", "Appwrite did not accept this email, password or name")
	}
	return storeErr(err, "account")
}

// InvitationTTL bounds an invitation's life (default 72 h, at most 30 days).
const (
	defaultInvitationTTL = 72 * time.Hour
	maxInvitationTTL     = 30 * 24 * time.Hour
)

// InvitationID is the document id of the invitation a token names (the token is never
// stored); InvitedUserID is the id of the account redeeming it creates, so the account's
// creation is the claim: Appwrite's primary key on user ids admits exactly one, on every
// engine, however many redeem at once.
func InvitationID(token string) string {
	h := sha256.Sum256([]byte("invitation\x00" + token))
	return "i" + hex.EncodeToString(h[:])[:32]
}

// InvitedUserID names the account an invitation creates.
func InvitedUserID(invitationID string) string {
	h := sha256.Sum256([]byte("invited-user\x00" + invitationID))
	return "u" + hex.EncodeToString(h[:])[:32]
}

func validToken(t string) bool {
	if len(t) != 43 {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(t)
	return err == nil
}

func (s *Service) adminMemberRoutes(a *httpapi.API) {
	s.memberForgetRoute(a)
	s.peopleRoutes(a) // the lists of members and invitations, revoking one (memberlist.go)
	// The admin creates an account that is a member at once.
	a.Handle("POST /api/members", httpapi.Route{MaxBody: 2 << 10}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		if err := s.requireAdmin(c, false); err != nil {
			return err
		}
		var in accountInput
		if err := httpapi.DecodeJSON(r, &in); err != nil {
			return err
		}
		if err := in.validate(); err != nil {
			return err
		}
		ua, err := s.usersAPI(c)
		if err != nil {
			return err
		}
		u, err := ua.Create("unique()", ua.WithCreateEmail(in.Email), ua.WithCreatePassword(in.Password), ua.WithCreateName(in.Name))
		if err != nil {
			return usersErr(err)
		}
		u, err = ua.UpdateLabels(u.Id, []string{s.cfg.MemberLabel})
		if err != nil {
			return usersErr(err)
		}
		if st, err := s.store(c); err == nil {
			auditPeople(r.Context(), st, c.User.ID, "member.create", "member/"+u.Id, map[string]any{"email": u.Email, "name": u.Name})
		}
		httpapi.WriteJSON(w, 201, s.memberView(u.Id, u.Email, u.Name, u.Labels))
		return nil
	})
	// The admin admits ({"member": true}) or removes ({"member": false}: the admin role
	// goes too) an existing account, or sets its role ({"role": "admin"|"member"}). An
	// admin cannot remove or demote themselves (a deployment always keeps its admin).
	a.Handle("PUT /api/members/{id}", httpapi.Route{MaxBody: 1 << 10}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		if err := s.requireAdmin(c, true); err != nil {
			return err
		}
		id, err := pathID(r, "id")
		if err != nil {
			return err
		}
		var in struct {
			Member *bool   `json:"member"`
			Role   *string `json:"role"`
		}
		if err := httpapi.DecodeJSON(r, &in); err != nil {
			return err
		}
		if (in.Member == nil) == (in.Role == nil) || (in.Role != nil && *in.Role != "admin" && *in.Role != "member") {
			return fault.Invalidf("invalid_member", "send {\"member\": true|false} or {\"role\": \"admin\"|\"member\"}")
		}
		if id == c.User.ID && ((in.Member != nil && !*in.Member) || (in.Role != nil && *in.Role != "admin")) {
			return fault.Conflictf("own_admin_role", "you cannot remove yourself or give up your own admin role; another admin can")
		}
		ua, err := s.usersAPI(c)
		if err != nil {
			return err
		}
		u, err := ua.Get(id)
		if err != nil {
			return storeErr(schema.MapError(err), "account")
		}
		before := s.roleOf(u.Labels)
		labels := slices.DeleteFunc(slices.Clone(u.Labels), func(l string) bool { return l == s.cfg.MemberLabel || l == s.cfg.AdminLabel })
		action := "member.role"
		switch {
		case in.Member != nil && *in.Member:
			labels, action = append(labels, s.cfg.MemberLabel), "member.admit"
			if before == "admin" {
				labels = append(labels, s.cfg.AdminLabel) // admitting an admin keeps them admin
			}
		case in.Member != nil:
			action = "member.remove"
		case *in.Role == "admin":
			labels = append(labels, s.cfg.MemberLabel, s.cfg.AdminLabel)
		default:
			labels = append(labels, s.cfg.MemberLabel)
		}
		u, err = ua.UpdateLabels(id, labels)
		if err != nil {
			return usersErr(err)
		}
		if st, err := s.store(c); err == nil {
			auditPeople(r.Context(), st, c.User.ID, action, "member/"+id, map[string]any{"email": u.Email, "name": u.Name, "from": before, "to": s.roleOf(u.Labels)})
		}
		httpapi.WriteJSON(w, 200, s.memberView(u.Id, u.Email, u.Name, u.Labels))
		return nil
	})
	// The admin issues a single-use invitation; the token is shown once and never stored.
	a.Handle("POST /api/invitations", httpapi.Route{MaxBody: 1 << 10}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		if err := s.requireAdmin(c, false); err != nil {
			return err
		}
		var in struct {
			ExpiresInHours int `json:"expiresInHours"`
		}
		if err := httpapi.DecodeJSON(r, &in); err != nil {
			return err
		}
		ttl := time.Duration(in.ExpiresInHours) * time.Hour
		if in.ExpiresInHours == 0 {
			ttl = defaultInvitationTTL
		}
		if ttl <= 0 || ttl > maxInvitationTTL {
			return fault.Invalidf("invalid_expiry", "expiresInHours must be 1..720")
		}
		var raw [32]byte
		if _, err := rand.Read(raw[:]); err != nil {
			return err
		}
		token := base64.RawURLEncoding.EncodeToString(raw[:])
		st, err := s.store(c)
		if err != nil {
			return err
		}
		exp := time.Now().UTC().Add(ttl).Format(time.RFC3339Nano)
		inv, err := schema.For[schema.Invitation](st, schema.CollInvitations).Create(r.Context(), InvitationID(token), "",
			&schema.Invitation{CreatedBy: c.User.ID, ExpiresAt: exp})
		if err != nil {
			return storeErr(err, "invitation")
		}
		auditPeople(r.Context(), st, c.User.ID, "invitation.create", "invitation/"+inv.ID, map[string]any{"expiresAt": inv.ExpiresAt})
		httpapi.WriteJSON(w, 201, map[string]any{"id": inv.ID, "token": token, "expiresAt": inv.ExpiresAt})
		return nil
	})
	// Redeeming an invitation makes the account (public: the invitee has none yet).
	a.Handle("POST /api/invitations/redeem", httpapi.Route{MaxBody: 2 << 10, Public: true}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		var in struct {
			Token string `json:"token"`
			accountInput
		}
		if err := httpapi.DecodeJSON(r, &in); err != nil {
			return err
		}
		invalid := fault.Forbiddenf("invitation_invalid", "this invitation is not valid")
		if !validToken(in.Token) {
			return invalid
		}
		if err := in.validate(); err != nil {
			return err
		}
		st, err := s.store(c)
		if err != nil {
			return err
		}
		invs := schema.For[schema.Invitation](st, schema.CollInvitations)
		inv, err := invs.Get(r.Context(), InvitationID(in.Token))
		if errors.Is(err, schema.ErrNotFound) {
			return invalid
		}
		if err != nil {
			return storeErr(err, "invitation")
		}
		if exp, perr := time.Parse(time.RFC3339Nano, inv.ExpiresAt); perr != nil || !time.Now().Before(exp) {
			return fault.Forbiddenf("invitation_expired", "this invitation has expired; ask for a new one")
		}
		ua, err := s.usersAPI(c)
		if err != nil {
			return err
		}
		uid := InvitedUserID(inv.ID)
		u, err := ua.Create(uid, ua.WithCreateEmail(in.Email), ua.WithCreatePassword(in.Password), ua.WithCreateName(in.Name))
		if err != nil {
			if !errors.Is(schema.MapError(err), schema.ErrConflict) {
				return usersErr(err)
			}
			// The claim is taken: either this invitation made its account already, or the
			// email belongs to another account.
			prior, gerr := ua.Get(uid)
			if gerr == nil {
				if !slices.Contains(prior.Labels, s.cfg.MemberLabel) {
					// Heal a redemption that stopped between the account and its label.
					_, _ = ua.UpdateLabels(uid, append(slices.Clone(prior.Labels), s.cfg.MemberLabel))
				}
				return fault.Conflictf("invitation_used", "this invitation was already used")
			}
			if errors.Is(schema.MapError(gerr), schema.ErrNotFound) {
				return fault.Conflictf("account_exists", "an account with this email already exists")
			}
			return storeErr(schema.MapError(gerr), "account")
		}
		if u, err = ua.UpdateLabels(uid, []string{s.cfg.MemberLabel}); err != nil {
			return usersErr(err)
		}
		now := time.Now().UTC().Format(time.RFC3339Nano)
		_, _ = invs.Update(r.Context(), inv.ID, map[string]any{"redeemedBy": uid, "redeemedAt": now}) // for the record only
		auditPeople(r.Context(), st, uid, "invitation.redeem", "invitation/"+inv.ID, map[string]any{"email": u.Email, "name": u.Name, "invitedBy": inv.CreatedBy})
		httpapi.WriteJSON(w, 201, s.memberView(u.Id, u.Email, u.Name, u.Labels))
		return nil
	})
}

func (s *Service) memberView(id, email, name string, labels []string) MemberView {
	if labels == nil {
		labels = []string{}
	}
	return MemberView{ID: id, Email: email, Name: name, Labels: labels,
		Member: slices.Contains(labels, s.cfg.MemberLabel) || slices.Contains(labels, s.cfg.AdminLabel)}
}
