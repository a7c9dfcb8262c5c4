package appwritetest

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/mail"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"
)

const (
	defaultJWTDuration = 900
	maxJWTDuration     = 3600
	sessionLifetime    = 365 * 24 * time.Hour
)

func hashPassword(salt, pw string) string {
	h := sha256.Sum256([]byte(salt + "\x00" + pw))
	return hex.EncodeToString(h[:])
}

type jwtClaims struct {
	UserID    string `json:"userId"`
	SessionID string `json:"sessionId"`
	Iat       int64  `json:"iat"`
	Exp       int64  `json:"exp"`
}

var b64 = base64.RawURLEncoding

func (s *Server) signJWT(c jwtClaims) string {
	head := b64.EncodeToString([]byte(`{"typ":"JWT","alg":"HS256"}`))
	body, _ := json.Marshal(c)
	msg := head + "." + b64.EncodeToString(body)
	mac := hmac.New(sha256.New, s.opts.JWTSecret)
	mac.Write([]byte(msg))
	return msg + "." + b64.EncodeToString(mac.Sum(nil))
}

func (s *Server) verifyJWT(tok string) (jwtClaims, bool) {
	var c jwtClaims
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return c, false
	}
	mac := hmac.New(sha256.New, s.opts.JWTSecret)
	mac.Write([]byte(parts[0] + "." + parts[1]))
	sig, err := b64.DecodeString(parts[2])
	if err != nil || subtle.ConstantTimeCompare(sig, mac.Sum(nil)) != 1 {
		return c, false
	}
	body, err := b64.DecodeString(parts[1])
	if err != nil || json.Unmarshal(body, &c) != nil {
		return c, false
	}
	if c.Exp <= s.now().Unix() {
		return c, false
	}
	return c, true
}

// userJSON renders the User model; the Account model (no password fields) when account.
func userJSON(u *user, account bool) map[string]any {
	prefs := u.Prefs
	if prefs == nil {
		prefs = map[string]any{}
	}
	labels := u.Labels
	if labels == nil {
		labels = []string{}
	}
	m := map[string]any{
		"$id":               u.ID,
		"$createdAt":        fmtTime(u.CreatedAt),
		"$updatedAt":        fmtTime(u.UpdatedAt),
		"name":              u.Name,
		"registration":      fmtTime(u.CreatedAt),
		"status":            u.Status,
		"labels":            labels,
		"passwordUpdate":    fmtTime(u.PasswordUpdate),
		"email":             u.Email,
		"phone":             "",
		"emailVerification": u.EmailVerification,
		"phoneVerification": false,
		"mfa":               false,
		"prefs":             prefs,
		"targets":           []any{},
		"accessedAt":        fmtTime(u.AccessedAt),
		// 1.9 additions that the 1.8 response filter leaves in place (null when unset).
		"emailCanonical":    nil,
		"emailIsFree":       nil,
		"emailIsDisposable": nil,
		"emailIsCorporate":  nil,
		"emailIsCanonical":  nil,
	}
	if !account {
		m["password"] = u.PasswordHash
		m["hash"] = "sha256"
		m["hashOptions"] = map[string]any{"type": "sha256"}
	}
	return m
}

func (s *Server) sessionJSON(se *session, withSecret bool, current bool) map[string]any {
	secret := ""
	if withSecret {
		secret = se.Secret
	}
	return map[string]any{
		"$id":                       se.ID,
		"$createdAt":                fmtTime(se.CreatedAt),
		"$updatedAt":                fmtTime(se.CreatedAt),
		"userId":                    se.UserID,
		"expire":                    fmtTime(se.Expire),
		"provider":                  se.Provider,
		"providerUid":               "",
		"providerAccessToken":       "",
		"providerAccessTokenExpiry": "",
		"providerRefreshToken":      "",
		"ip":                        "127.0.0.1",
		"osCode":                    "",
		"osName":                    "",
		"osVersion":                 "",
		"clientType":                "",
		"clientCode":                "",
		"clientName":                "",
		"clientVersion":             "",
		"clientEngine":              "",
		"clientEngineVersion":       "",
		"deviceName":                "",
		"deviceBrand":               "",
		"deviceModel":               "",
		"countryCode":               "--",
		"countryName":               "Unknown",
		"current":                   current,
		"factors":                   []string{"password"},
		"secret":                    secret,
		"mfaUpdatedAt":              "",
	}
}

func (s *Server) routesAccount() {
	s.handle("GET /v1/health/version", "public", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		writeJSON(w, 200, map[string]any{"version": Version})
		return nil
	})

	s.handle("POST /v1/account", "sessions.write", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		body, err := readBody(r)
		if err != nil {
			return err
		}
		// abuse-limit 10, default key url:{url},ip:{ip}, default time 3600 s.
		if err := s.abuse.allow(w, "/v1/account", "ip:"+clientIP(r), s.limits.SignUp, c.kind == keyCaller); err != nil {
			return err
		}
		if c.kind == userCaller {
			return errf(401, "user_session_already_exists", "Creation of a session is prohibited when a session is active.")
		}
		u, err := s.createUser(body, true)
		if err != nil {
			return err
		}
		writeJSON(w, 201, u)
		return nil
	})

	s.handle("POST /v1/account/sessions/email", "sessions.write", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		body, err := readBody(r)
		if err != nil {
			return err
		}
		if c.kind == userCaller && c.session != nil {
			return errf(401, "user_session_already_exists", "Creation of a session is prohibited when a session is active.")
		}
		email, _ := str(body, "email")
		pw, _ := str(body, "password")
		// abuse-limit 10 per hour, key url:{url},email:{param-email}, abuse-reset [201].
		abuseKey := "email:" + email
		if err := s.abuse.allow(w, "/v1/account/sessions/email", abuseKey, s.limits.EmailSession, c.kind == keyCaller); err != nil {
			return err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		var found *user
		for _, u := range s.st.Users {
			if strings.EqualFold(u.Email, email) {
				found = u
			}
		}
		if found == nil || found.PasswordHash == "" || subtle.ConstantTimeCompare([]byte(found.PasswordHash), []byte(hashPassword(found.Salt, pw))) != 1 {
			return errf(401, "user_invalid_credentials", "Invalid credentials. Please check the email and password.")
		}
		if !found.Status {
			return errf(401, "user_blocked", "The current user has been blocked.")
		}
		se := s.newSessionLocked(found.ID)
		s.abuse.reset("/v1/account/sessions/email", abuseKey, s.limits.EmailSession)
		s.setSessionCookie(w, r, se)
		writeJSON(w, 201, s.sessionJSON(se, c.kind == keyCaller, true))
		return nil
	})

	s.handle("GET /v1/account", "account", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		writeJSON(w, 200, userJSON(c.user, true))
		return nil
	})

	jwt := func(w http.ResponseWriter, r *http.Request, c *caller) error {
		body, err := readBody(r)
		if err != nil {
			return err
		}
		d, ok, err := intParam(body, "duration")
		if err != nil {
			return err
		}
		if !ok {
			d = defaultJWTDuration
		}
		if d < 0 || d > maxJWTDuration {
			return errArgument("duration", "Value must be a valid range between 0 and 3,600")
		}
		// abuse-limit APP_LIMIT_WRITE_RATE_DEFAULT*2 = 120 per 60 s, key url:{url},userId:{userId}.
		uid := ""
		if c.user != nil {
			uid = c.user.ID
		}
		if err := s.abuse.allow(w, "/v1/account/jwts", "userId:"+uid, s.limits.CreateJWT, c.kind == keyCaller); err != nil {
			return err
		}
		if c.session == nil {
			return errf(404, "user_session_not_found", "The current user session could not be found.")
		}
		now := s.now()
		tok := s.signJWT(jwtClaims{UserID: c.user.ID, SessionID: c.session.ID, Iat: now.Unix(), Exp: now.Unix() + d})
		writeJSON(w, 201, map[string]any{"jwt": tok})
		return nil
	}
	s.handle("POST /v1/account/jwts", "account", jwt)
	s.handle("POST /v1/account/jwt", "account", jwt)

	s.handle("GET /v1/account/sessions/{sessionId}", "account", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		se := s.findOwnSession(c, r.PathValue("sessionId"))
		if se == nil {
			return errf(404, "user_session_not_found", "The current user session could not be found.")
		}
		writeJSON(w, 200, s.sessionJSON(se, false, c.session != nil && se.ID == c.session.ID))
		return nil
	})

	s.handle("DELETE /v1/account/sessions/{sessionId}", "account", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		se := s.findOwnSession(c, r.PathValue("sessionId"))
		if se == nil {
			return errf(404, "user_session_not_found", "The current user session could not be found.")
		}
		delete(s.st.Sessions, se.ID)
		s.changed()
		if c.session != nil && c.session.ID == se.ID {
			http.SetCookie(w, &http.Cookie{Name: s.sessionCookieName(), Value: "", Path: "/", MaxAge: -1, HttpOnly: true})
			w.Header().Set("X-Fallback-Cookies", "[]")
		}
		w.WriteHeader(204)
		return nil
	})

	// Users API (server keys).
	s.handle("POST /v1/users", "users.write", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		body, err := readBody(r)
		if err != nil {
			return err
		}
		u, err := s.createUser(body, false)
		if err != nil {
			return err
		}
		writeJSON(w, 201, u)
		return nil
	})
	// The list of users: limit (default 25, at most 5000), offset and cursorAfter, in the
	// order the accounts were made (Appwrite's default); other queries (filters, search,
	// ordering) are refused here, which is stricter than Appwrite: nothing uses them.
	s.handle("GET /v1/users", "users.read", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		qs, err := parseQueries(r)
		if err != nil {
			return err
		}
		if r.URL.Query().Get("search") != "" {
			return errQuery("search is not supported by this emulator")
		}
		limit, offset, cursor := 25, 0, ""
		for _, q := range qs {
			switch q.Method {
			case "limit", "offset":
				n, err := intValue(q)
				if err != nil || n < 0 || (q.Method == "limit" && (n < 1 || n > 5000)) {
					return errQuery("Invalid %s: %v", q.Method, q.Values)
				}
				if q.Method == "limit" {
					limit = n
				} else {
					offset = n
				}
			case "cursorAfter":
				if vs := q.strValues(); len(vs) == 1 {
					cursor = vs[0]
				} else {
					return errQuery("Invalid cursor: %v", q.Values)
				}
			default:
				return errQuery("Invalid query method: %s", q.Method)
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		all := make([]*user, 0, len(s.st.Users))
		for _, u := range s.st.Users {
			all = append(all, u)
		}
		sort.Slice(all, func(i, j int) bool {
			if !all[i].CreatedAt.Equal(all[j].CreatedAt) {
				return all[i].CreatedAt.Before(all[j].CreatedAt)
			}
			return all[i].ID < all[j].ID
		})
		rows := all
		if cursor != "" {
			at := slices.IndexFunc(all, func(u *user) bool { return u.ID == cursor })
			if at < 0 {
				return errf(400, "document_not_found", "Document '%s' for the 'cursor' value not found.", cursor)
			}
			rows = all[at+1:]
		}
		if offset > len(rows) {
			offset = len(rows)
		}
		rows = rows[offset:]
		if len(rows) > limit {
			rows = rows[:limit]
		}
		out := make([]map[string]any, len(rows))
		for i, u := range rows {
			out[i] = userJSON(u, false)
		}
		writeJSON(w, 200, map[string]any{"total": len(all), "users": out})
		return nil
	})
	s.handle("GET /v1/users/{userId}", "users.read", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		u := s.st.Users[r.PathValue("userId")]
		if u == nil {
			return errUserNotFound()
		}
		writeJSON(w, 200, userJSON(u, false))
		return nil
	})
	// DELETE /v1/users/{userId} (Appwrite 1.9.6 app/controllers/api/users.php "delete"):
	// 204; the user is gone at once, with their sessions (so their JWTs answer as a
	// guest's); the deletes worker removes the rest of theirs later.
	s.handle("DELETE /v1/users/{userId}", "users.write", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		id := r.PathValue("userId")
		if s.st.Users[id] == nil {
			return errUserNotFound()
		}
		delete(s.st.Users, id)
		for sid, se := range s.st.Sessions {
			if se.UserID == id {
				delete(s.st.Sessions, sid)
			}
		}
		s.changed()
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
	s.handle("PUT /v1/users/{userId}/labels", "users.write", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		body, err := readBody(r)
		if err != nil {
			return err
		}
		labels, _, err := strList(body, "labels")
		if err != nil {
			return err
		}
		for _, l := range labels {
			if l == "" || len(l) > 36 || strings.IndexFunc(l, func(r rune) bool {
				return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
			}) >= 0 {
				return errArgument("labels", "Value must a valid array no longer than 1000 items and Value must be a valid string and at least 1 chars and no longer than 36 chars and only alphanumeric chars")
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		u := s.st.Users[r.PathValue("userId")]
		if u == nil {
			return errUserNotFound()
		}
		u.Labels = labels
		u.UpdatedAt = s.now()
		s.changed()
		writeJSON(w, 200, userJSON(u, false))
		return nil
	})
	s.handle("POST /v1/users/{userId}/sessions", "users.write", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		u := s.st.Users[r.PathValue("userId")]
		if u == nil {
			return errUserNotFound()
		}
		se := s.newSessionLocked(u.ID)
		se.Provider = "server"
		writeJSON(w, 201, s.sessionJSON(se, true, false))
		return nil
	})
	s.handle("POST /v1/users/{userId}/jwts", "users.write", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		body, err := readBody(r)
		if err != nil {
			return err
		}
		d, ok, err := intParam(body, "duration")
		if err != nil {
			return err
		}
		if !ok {
			d = defaultJWTDuration
		}
		if d < 0 || d > maxJWTDuration {
			return errArgument("duration", "Value must be a valid range between 0 and 3,600")
		}
		sid, _ := str(body, "sessionId")
		s.mu.Lock()
		defer s.mu.Unlock()
		u := s.st.Users[r.PathValue("userId")]
		if u == nil {
			return errUserNotFound()
		}
		var se *session
		for _, x := range s.st.Sessions {
			if x.UserID != u.ID {
				continue
			}
			if sid == x.ID || ((sid == "" || sid == "recent") && (se == nil || x.CreatedAt.After(se.CreatedAt))) {
				se = x
			}
		}
		if se == nil {
			return errf(404, "user_session_not_found", "The current user session could not be found.")
		}
		now := s.now()
		writeJSON(w, 201, map[string]any{"jwt": s.signJWT(jwtClaims{UserID: u.ID, SessionID: se.ID, Iat: now.Unix(), Exp: now.Unix() + d})})
		return nil
	})
}

func (s *Server) findOwnSession(c *caller, id string) *session {
	if id == "current" {
		return c.session
	}
	se := s.st.Sessions[id]
	if se == nil || se.UserID != c.user.ID {
		return nil
	}
	return se
}

func (s *Server) setSessionCookie(w http.ResponseWriter, r *http.Request, se *session) {
	http.SetCookie(w, &http.Cookie{
		Name: s.sessionCookieName(), Value: se.Secret, Path: "/", Expires: se.Expire,
		HttpOnly: true, SameSite: http.SameSiteLaxMode,
	})
	// Like Appwrite, the fallback header is sent only when the cookie cannot be relied on:
	// the caller is on another site than the API (the web SDK then keeps it in storage).
	if o := r.Header.Get("Origin"); o != "" {
		if u, err := url.Parse(o); err == nil && u.Host == r.Host {
			return
		}
	}
	fb, _ := json.Marshal(map[string]string{s.sessionCookieName(): se.Secret})
	w.Header().Set("X-Fallback-Cookies", string(fb))
}

func (s *Server) newSessionLocked(userID string) *session {
	now := s.now()
	se := &session{ID: uniqueID(), UserID: userID, Secret: randomHex(64), Provider: "email",
		CreatedAt: now, Expire: now.Add(sessionLifetime)}
	s.st.Sessions[se.ID] = se
	if u := s.st.Users[userID]; u != nil {
		u.AccessedAt = now
	}
	s.changed()
	return se
}

// createUser makes the account and returns it rendered under the lock (the Account model
// when requirePassword, the sign-up path; the User model otherwise): once the lock is
// released another request may change the user.
func (s *Server) createUser(body map[string]any, requirePassword bool) (map[string]any, error) {
	rawID, _ := str(body, "userId")
	id, err := resolveID("userId", rawID)
	if err != nil {
		return nil, err
	}
	email, hasEmail := str(body, "email")
	if requirePassword || hasEmail {
		if _, err := mail.ParseAddress(email); err != nil || !strings.Contains(email, "@") {
			return nil, errArgument("email", "Value must be a valid email address")
		}
	}
	pw, hasPw := str(body, "password")
	if requirePassword || hasPw {
		if len(pw) < 8 || len(pw) > 256 {
			return nil, errArgument("password", "Password must be between 8 and 256 characters long.")
		}
	}
	name, _ := str(body, "name")
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.st.Users[id]; ok {
		return nil, errf(409, "user_already_exists", "A user with the same id, email, or phone already exists in this project.")
	}
	for _, u := range s.st.Users {
		if email != "" && strings.EqualFold(u.Email, email) {
			return nil, errf(409, "user_already_exists", "A user with the same id, email, or phone already exists in this project.")
		}
	}
	now := s.now()
	u := &user{ID: id, Email: strings.ToLower(email), Name: name, Status: true, CreatedAt: now, UpdatedAt: now, Prefs: map[string]any{}}
	if pw != "" {
		u.Salt = randomHex(8)
		u.PasswordHash = hashPassword(u.Salt, pw)
		u.PasswordUpdate = now
	}
	s.st.Users[id] = u
	s.changed()
	return userJSON(u, requirePassword), nil
}
