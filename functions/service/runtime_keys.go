package service

import (
	"errors"
	"net/http"
	"time"
	"unicode/utf8"

	"privateassistant/fault"
	"privateassistant/functions/httpapi"
	"privateassistant/runtimeapi"
	"privateassistant/schema"
)

// RuntimeKeyView is a runtime key as the admin API shows it: never its hash. Secret is
// set only in the answer to its creation (shown once).
type RuntimeKeyView struct {
	ID                string   `json:"id"`
	AppID             string   `json:"appId"`
	Name              string   `json:"name"`
	Roles             []string `json:"roles"`
	RateLimit         int64    `json:"rateLimit"`
	RateWindowSeconds int64    `json:"rateWindowSeconds"`
	CreatedBy         string   `json:"createdBy"`
	CreatedAt         string   `json:"createdAt"`
	RevokedAt         *string  `json:"revokedAt"`
	// UserKeys: the app's user-token issuer and keys (null: the key names users with
	// X-App-User).
	UserKeys any `json:"userKeys"`
	// Environment: "production", or the admin's name for another (staging, …): its
	// users, conversations, responses and tools are its own.
	Environment string `json:"environment"`
	Secret      string `json:"secret,omitempty"`
}

func runtimeKeyView(k *schema.RuntimeKey) RuntimeKeyView {
	roles := k.Roles
	if roles == nil {
		roles = []string{}
	}
	return RuntimeKeyView{ID: k.ID, AppID: k.AppID, Name: k.Name, Roles: roles, RateLimit: k.RateLimit,
		RateWindowSeconds: k.RateWindowMs / 1000, CreatedBy: k.CreatedBy, CreatedAt: k.CreatedAt, RevokedAt: k.RevokedAt,
		UserKeys: userKeysView(k), Environment: envName(runtimeapi.EnvOf(k))}
}

func (s *Service) adminAudit(c *httpapi.Call, st *schema.Store, r *http.Request, action, target string, detail map[string]any) error {
	_, err := schema.For[schema.Audit](st, schema.CollAudit).Create(r.Context(), "unique()", "", &schema.Audit{
		ActorID: c.User.ID, Action: action, Target: target, Detail: runtimeapi.Describe(detail),
		At: time.Now().UTC().Format(time.RFC3339Nano)})
	return storeErr(err, "audit")
}

// runtimeKeyRoutes are the admin's: issue, list and revoke runtime keys, and link an
// app's user to an existing member.
func (s *Service) runtimeKeyRoutes(a *httpapi.API) {
	s.adminUserKeysRoute(a)
	a.Handle("POST /api/runtime-keys", httpapi.Route{MaxBody: 28 << 10}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		if err := s.requireAdmin(c, false); err != nil {
			return err
		}
		var body struct {
			AppID             string        `json:"appId"`
			Name              string        `json:"name"`
			Roles             []string      `json:"roles"`
			RateLimit         int64         `json:"rateLimit"`
			RateWindowSeconds int64         `json:"rateWindowSeconds"`
			UserKeys          *userKeysBody `json:"userKeys"`
			Environment       string        `json:"environment"`
		}
		if err := httpapi.DecodeJSON(r, &body); err != nil {
			return err
		}
		if !runtimeapi.ValidAppID(body.AppID) {
			return fault.Invalidf("invalid_app_id", "appId must be a lower-case letter then up to 23 lower-case letters or digits")
		}
		if body.Name == "" {
			body.Name = body.AppID
		}
		if !utf8.ValidString(body.Name) || utf8.RuneCountInString(body.Name) > schema.SizeTitle {
			return fault.Invalidf("invalid_name", "name must be at most %d characters", schema.SizeTitle)
		}
		if len(body.Roles) == 0 || len(body.Roles) > 32 {
			return fault.Invalidf("invalid_roles", "roles must name 1-32 roles")
		}
		for _, role := range body.Roles {
			if !roleRe.MatchString(role) {
				return fault.Invalidf("invalid_roles", "role %q is not a role name", role)
			}
		}
		if body.RateLimit == 0 {
			body.RateLimit = 120
		}
		if body.RateWindowSeconds == 0 {
			body.RateWindowSeconds = 60
		}
		if body.RateLimit < 1 || body.RateLimit > 1_000_000 || body.RateWindowSeconds < 1 || body.RateWindowSeconds > 86400 {
			return fault.Invalidf("invalid_rate_limit", "rateLimit must be 1..1000000 calls per rateWindowSeconds 1..86400")
		}
		env := runtimeapi.NormalEnv(body.Environment)
		if env != "" && !runtimeapi.ValidEnv(env) {
			return badParam("environment", "invalid_environment", "environment must be production, development, staging or a name of a lower-case letter and up to 11 lower-case letters or digits")
		}
		var uk runtimeapi.UserKeys
		if body.UserKeys != nil {
			if uk = body.UserKeys.keys(); uk.Issuer != "" {
				if err := s.validUserKeys(uk); err != nil {
					return err
				}
			}
		}
		id, secret, err := runtimeapi.NewSecret()
		if err != nil {
			return err
		}
		st, err := s.store(c)
		if err != nil {
			return err
		}
		rec, err := schema.For[schema.RuntimeKey](st, schema.CollRuntimeKeys).Create(r.Context(), id, "", &schema.RuntimeKey{
			AppID: body.AppID, Name: body.Name, SecretHash: runtimeapi.HashSecret(secret), Roles: body.Roles,
			RateLimit: body.RateLimit, RateWindowMs: body.RateWindowSeconds * 1000, CreatedBy: c.User.ID,
			UserIssuer: optional(uk.Issuer), UserJWKS: optional(uk.JWKS), UserJWKSURL: optional(uk.JWKSURL),
			Environment: optional(env)})
		if err != nil {
			return storeErr(err, "runtime key")
		}
		if err := s.adminAudit(c, st, r, "runtime.key.create", "runtime_key/"+id, map[string]any{"appId": body.AppID, "roles": body.Roles, "environment": envName(env)}); err != nil {
			return err
		}
		v := runtimeKeyView(rec)
		v.Secret = secret
		httpapi.WriteJSON(w, 201, v)
		return nil
	})

	a.Handle("GET /api/runtime-keys", httpapi.Route{}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		if err := s.requireAdmin(c, false); err != nil {
			return err
		}
		st, err := s.store(c)
		if err != nil {
			return err
		}
		recs, err := schema.For[schema.RuntimeKey](st, schema.CollRuntimeKeys).All(r.Context(), schema.ListQuery{})
		if err != nil {
			return storeErr(err, "runtime key")
		}
		out := make([]RuntimeKeyView, 0, len(recs))
		for i := range recs {
			out = append(out, runtimeKeyView(&recs[i]))
		}
		httpapi.WriteJSON(w, 200, map[string]any{"keys": out})
		return nil
	})

	// Revocation: the record is kept (the audit names it) with revokedAt set; every call
	// reads the record, so the key is refused from the next call on.
	a.Handle("DELETE /api/runtime-keys/{id}", httpapi.Route{MaxBody: 1 << 10}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		if err := s.requireAdmin(c, true); err != nil {
			return err
		}
		id := r.PathValue("id")
		if !runtimeapi.ValidKeyID(id) {
			return fault.Missing("runtime key", nil)
		}
		st, err := s.store(c)
		if err != nil {
			return err
		}
		keys := schema.For[schema.RuntimeKey](st, schema.CollRuntimeKeys)
		rec, err := keys.Get(r.Context(), id)
		if err != nil {
			return storeErr(err, "runtime key")
		}
		if rec.RevokedAt == nil {
			if rec, err = keys.Update(r.Context(), id, map[string]any{"revokedAt": time.Now().UTC().Format(time.RFC3339Nano)}); err != nil {
				return storeErr(err, "runtime key")
			}
			if err := s.adminAudit(c, st, r, "runtime.key.revoke", "runtime_key/"+id, map[string]any{"appId": rec.AppID}); err != nil {
				return err
			}
		}
		httpapi.WriteJSON(w, 200, runtimeKeyView(rec))
		return nil
	})

	// A link makes an app's user act as an existing member (userId); an empty userId
	// removes the link, and the app's user is its own derived user again.
	a.Handle("PUT /api/runtime-links", httpapi.Route{MaxBody: 2 << 10}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		if err := s.requireAdmin(c, false); err != nil {
			return err
		}
		var body struct {
			AppID  string `json:"appId"`
			User   string `json:"user"`
			UserID string `json:"userId"`
		}
		if err := httpapi.DecodeJSON(r, &body); err != nil {
			return err
		}
		if !runtimeapi.ValidAppID(body.AppID) || !runtimeapi.ValidExternalID(body.User) {
			return fault.Invalidf("invalid_link", "appId and user (the app's id of its user) are required")
		}
		st, err := s.store(c)
		if err != nil {
			return err
		}
		links := schema.For[schema.RuntimeLink](st, schema.CollRuntimeLinks)
		linkID := runtimeapi.LinkID(body.AppID, body.User)
		if body.UserID == "" {
			if err := links.Delete(r.Context(), linkID); err != nil && !errors.Is(err, schema.ErrNotFound) {
				return storeErr(err, "runtime link")
			}
			if err := s.adminAudit(c, st, r, "runtime.link.delete", "runtime_link/"+linkID, map[string]any{"appId": body.AppID}); err != nil {
				return err
			}
			httpapi.WriteJSON(w, 200, map[string]any{"appId": body.AppID, "user": body.User, "userId": nil})
			return nil
		}
		ua, err := s.usersAPI(c)
		if err != nil {
			return err
		}
		u, err := ua.Get(body.UserID)
		if err != nil || !s.isMember(httpapi.User{ID: u.Id, Labels: u.Labels}) {
			return fault.Invalidf("invalid_user_id", "userId must name an existing member")
		}
		_, err = links.Create(r.Context(), linkID, "", &schema.RuntimeLink{AppID: body.AppID, ExternalID: body.User, UserID: body.UserID, CreatedBy: c.User.ID})
		if errors.Is(err, schema.ErrConflict) {
			_, err = links.Update(r.Context(), linkID, map[string]any{"userId": body.UserID, "createdBy": c.User.ID})
		}
		if err != nil {
			return storeErr(err, "runtime link")
		}
		if err := s.adminAudit(c, st, r, "runtime.link.set", "runtime_link/"+linkID, map[string]any{"appId": body.AppID, "userId": body.UserID}); err != nil {
			return err
		}
		httpapi.WriteJSON(w, 200, map[string]any{"appId": body.AppID, "user": body.User, "userId": body.UserID})
		return nil
	})
}

// envName is an environment as the API shows it.
func envName(env string) string {
	if env == "" {
		return "production"
	}
	return env
}
