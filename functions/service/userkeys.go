package service

import (
	"bytes"
	"encoding/json"
	"net/http"

	"privateassistant/apptools"
	"privateassistant/fault"
	"privateassistant/functions/httpapi"
	"privateassistant/runtimeapi"
	"privateassistant/schema"
)

// userKeysBody registers an app's user-token keys: its issuer and its public key set,
// inline (jwks, an object) or by URL (jwksUrl).
type userKeysBody struct {
	Issuer  string          `json:"issuer"`
	JWKS    json.RawMessage `json:"jwks"`
	JWKSURL string          `json:"jwksUrl"`
}

func (b userKeysBody) keys() runtimeapi.UserKeys {
	k := runtimeapi.UserKeys{Issuer: b.Issuer, JWKSURL: b.JWKSURL}
	if raw := bytes.TrimSpace(b.JWKS); len(raw) > 0 && string(raw) != "null" {
		var c bytes.Buffer
		if json.Compact(&c, raw) == nil {
			k.JWKS = c.String()
		} else {
			k.JWKS = string(raw)
		}
	}
	return k
}

// validUserKeys checks keys against the callback allow-list (a jwksUrl must be one of
// the app's allowed addresses: the functions fetch it).
func (s *Service) validUserKeys(k runtimeapi.UserKeys) error {
	allow, err := apptools.ParseAllowList(s.cfg.AppCallbackAllow)
	if err != nil {
		return &fault.Error{Kind: fault.Unavailable, Code: "not_configured", Message: "the app address allow-list is misconfigured"}
	}
	if err := k.Validate(allow.Allows); err != nil {
		return badParam("jwks", "invalid_user_keys", "%s", err.Error())
	}
	return nil
}

// userKeysPatch is the record patch that stores k (an empty issuer clears them).
func userKeysPatch(k runtimeapi.UserKeys) map[string]any {
	opt := func(v string) any {
		if v == "" || k.Issuer == "" {
			return nil
		}
		return v
	}
	return map[string]any{"userIssuer": opt(k.Issuer), "userJwks": opt(k.JWKS), "userJwksUrl": opt(k.JWKSURL)}
}

// userKeysView is what the APIs show of a key's user keys (the set itself only as a
// count: it is public, but long).
func userKeysView(rec *schema.RuntimeKey) any {
	k, ok := runtimeapi.KeysOf(rec)
	if !ok {
		return nil
	}
	v := map[string]any{"issuer": k.Issuer}
	if k.JWKSURL != "" {
		v["jwksUrl"] = k.JWKSURL
	}
	if k.JWKS != "" {
		var set struct {
			Keys []json.RawMessage `json:"keys"`
		}
		_ = json.Unmarshal([]byte(k.JWKS), &set)
		v["inlineKeys"] = len(set.Keys)
	}
	return v
}

// userKeyRoutes: an app registers its user keys once with its own key (trust on first
// use: from then on only a signed user token speaks for a user, so a leaked key cannot
// replace them); an admin sets, replaces or clears them for any key.
func (s *Service) appUserKeysRoute(a *httpapi.API) {
	a.Handle("PUT /api/v1/user-keys", httpapi.Route{MaxBody: 24 << 10, RuntimeKey: true}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		rc, err := s.runtimeApp(r, c)
		if err != nil {
			return err
		}
		var body userKeysBody
		if err := httpapi.DecodeJSON(r, &body); err != nil {
			return err
		}
		if _, ok := runtimeapi.KeysOf(rc.key); ok {
			return fault.Conflictf("user_keys_registered", "this key's user keys are registered already; an administrator can replace them")
		}
		k := body.keys()
		if err := s.validUserKeys(k); err != nil {
			return err
		}
		rec, err := schema.For[schema.RuntimeKey](rc.st, schema.CollRuntimeKeys).Update(r.Context(), rc.id.KeyID, userKeysPatch(k))
		if err != nil {
			return storeErr(err, "runtime key")
		}
		if err := runtimeapi.Audit(r.Context(), rc.st, rc.id, runtimeapi.ActionUserKeys, "runtime_key/"+rc.id.KeyID,
			map[string]any{"issuer": k.Issuer, "jwksUrl": k.JWKSURL}); err != nil {
			return storeErr(err, "audit")
		}
		httpapi.WriteJSON(w, 200, map[string]any{"userKeys": userKeysView(rec)})
		return nil
	})
}

func (s *Service) adminUserKeysRoute(a *httpapi.API) {
	a.Handle("PUT /api/runtime-keys/{id}/user-keys", httpapi.Route{MaxBody: 24 << 10}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		if err := s.requireAdmin(c, true); err != nil {
			return err
		}
		id := r.PathValue("id")
		if !runtimeapi.ValidKeyID(id) {
			return fault.Missing("runtime key", nil)
		}
		var body userKeysBody
		if err := httpapi.DecodeJSON(r, &body); err != nil {
			return err
		}
		k := body.keys()
		if k.Issuer != "" {
			if err := s.validUserKeys(k); err != nil {
				return err
			}
		}
		st, err := s.store(c)
		if err != nil {
			return err
		}
		keys := schema.For[schema.RuntimeKey](st, schema.CollRuntimeKeys)
		if _, err := keys.Get(r.Context(), id); err != nil {
			return storeErr(err, "runtime key")
		}
		rec, err := keys.Update(r.Context(), id, userKeysPatch(k))
		if err != nil {
			return storeErr(err, "runtime key")
		}
		action := "runtime.key.user_keys"
		if k.Issuer == "" {
			action = "runtime.key.user_keys_cleared"
		}
		if err := s.adminAudit(c, st, r, action, "runtime_key/"+id, map[string]any{"appId": rec.AppID, "issuer": k.Issuer, "jwksUrl": k.JWKSURL}); err != nil {
			return err
		}
		httpapi.WriteJSON(w, 200, runtimeKeyView(rec))
		return nil
	})
}

func optional(v string) *string {
	if v == "" {
		return nil
	}
	return &v
}
