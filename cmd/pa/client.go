package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// password reads PA_PASSWORD, or the first line of stdin.
func (c *cli) password() string {
	if pw := os.Getenv("PA_PASSWORD"); pw != "" {
		return pw
	}
	fmt.Fprint(c.errw, "password: ")
	line, _ := bufio.NewReader(c.in).ReadString('\n')
	return strings.TrimSpace(line)
}

// checkRole refuses (usage, nothing sent) a role the server does not list for this user.
func (c *cli) checkRole(ctx context.Context, role string) error {
	b, err := c.call(ctx, "GET", "/api/roles", nil)
	if err != nil {
		return err
	}
	var r struct {
		Roles []struct {
			Name string `json:"name"`
		} `json:"roles"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("read roles: %w", err)
	}
	names := []string{}
	for _, x := range r.Roles {
		if x.Name == role {
			return nil
		}
		names = append(names, x.Name)
	}
	return fail(exitUsage, "send: you may not use the role %q; you may use: %s", role, strings.Join(names, ", "))
}

func (c *cli) sessionFile() string { return filepath.Join(c.dir, "session") }

// login opens an Appwrite session and keeps its secret (mode 0600) for later calls.
func (c *cli) login(ctx context.Context, email string) error {
	pw := c.password()
	body, _ := json.Marshal(map[string]string{"email": email, "password": pw})
	req, err := http.NewRequestWithContext(ctx, "POST", c.endpoint+"/account/sessions/email", bytes.NewReader(body))
	if err != nil {
		return fail(exitUsage, "APPWRITE_ENDPOINT %q is not a URL: %v", c.endpoint, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Appwrite-Project", c.project)
	resp, err := c.http.Do(req)
	if err != nil {
		return unreachable(err, "the assistant", c.endpoint)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 201 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var ae struct{ Message, Type string }
		_ = json.Unmarshal(b, &ae)
		switch {
		case resp.StatusCode == 401 && ae.Type == "user_invalid_credentials":
			return fail(exitSignedOut, "wrong email or password for %s", email)
		case resp.StatusCode == 429:
			return fail(exitError, "too many sign-in attempts for now; try again in a minute")
		case ae.Message != "":
			return fail(exitSignedOut, "sign-in failed: %s", ae.Message)
		}
		return fail(exitSignedOut, "sign-in failed (HTTP %d)", resp.StatusCode)
	}
	secret := ""
	for _, ck := range resp.Cookies() {
		if ck.Name == "a_session_"+c.project {
			secret = ck.Value
		}
	}
	if secret == "" {
		return fail(exitError, "Appwrite did not return a session cookie")
	}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(c.sessionFile(), []byte(secret), 0o600); err != nil {
		return err
	}
	c.dropJWT() // minted from the previous session
	fmt.Fprintln(c.out, "signed in as", email)
	return nil
}

// logout forgets the session (signed out already is not an error).
func (c *cli) logout() error {
	c.dropJWT()
	if err := os.Remove(c.sessionFile()); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// checkID refuses ids no record can have and that escaping cannot make safe ("." and
// ".." are dot-segments a server resolves; the empty id names the collection).
func checkID(what, id string) error {
	if id == "" || id == "." || id == ".." {
		return fail(exitUsage, "%q is not a valid %s id", id, what)
	}
	return nil
}

// apiPath builds an API path from literal segments and ids; every id is path-escaped, so
// an id can never reach another endpoint ("a/b", "x?y", "x#y"). Ids are checked with
// checkID first.
func apiPath(literal string, ids ...string) string {
	parts := strings.Split(literal, "{}")
	if len(parts) != len(ids)+1 {
		panic("apiPath: " + literal + " takes " + fmt.Sprint(len(parts)-1) + " ids")
	}
	var b strings.Builder
	for i, p := range parts {
		b.WriteString(p)
		if i < len(ids) {
			b.WriteString(url.PathEscape(ids[i]))
		}
	}
	return b.String()
}

// withQuery appends query parameters (escaped; empty values are left out).
func withQuery(path string, kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			q.Set(kv[i], kv[i+1])
		}
	}
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

// call sends one API request and returns the raw JSON answer; an error envelope becomes an
// exitErr with the exit code of its status. A 401 drops the kept JWT and the call is sent
// once more with a fresh one (the functions authenticate before they act, so a refused
// request did nothing).
func (c *cli) call(ctx context.Context, method, path string, body any) (json.RawMessage, error) {
	status, b, err := c.send(ctx, method, path, body)
	if err == nil && status == 401 && c.dropToken != nil {
		c.dropToken()
		status, b, err = c.send(ctx, method, path, body)
	}
	if err != nil {
		return nil, err
	}
	return c.answer(method, path, status, b)
}

func (c *cli) send(ctx context.Context, method, path string, body any) (int, []byte, error) {
	tok, err := c.token(ctx)
	if err != nil {
		return 0, nil, err
	}
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, nil, fail(exitUsage, "PA_URL %q is not a URL: %v", c.base, err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, unreachable(err, "the assistant", c.base)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, b, nil
}

// answer turns a response into the call's result.
func (c *cli) answer(method, path string, status int, b []byte) (json.RawMessage, error) {
	if status >= 400 {
		var env struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		_ = json.Unmarshal(b, &env)
		code := exitError
		switch status {
		case 401:
			code = exitSignedOut
		case 404:
			code = exitNotFound
		case 409:
			code = exitConflict
		}
		if env.Error.Code == "" {
			return b, fail(code, "%s %s: HTTP %d", method, path, status)
		}
		return b, fail(code, "%s: %s", env.Error.Code, env.Error.Message)
	}
	return b, nil
}

// print writes an answer: raw with asJSON, indented otherwise. With an error, the raw
// answer (the error envelope) is printed only with asJSON.
func (c *cli) print(asJSON bool, b json.RawMessage, err error) error {
	if err != nil {
		if asJSON && len(b) > 0 {
			fmt.Fprintln(c.out, string(b))
		}
		return err
	}
	if asJSON {
		fmt.Fprintln(c.out, string(b))
		return nil
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, b, "", "  ") == nil {
		fmt.Fprintln(c.out, pretty.String())
	} else {
		fmt.Fprintln(c.out, string(b))
	}
	return nil
}

// printAs returns print bound to asJSON, to take a call's two results directly.
func (c *cli) printAs(asJSON bool) func(json.RawMessage, error) error {
	return func(b json.RawMessage, err error) error { return c.print(asJSON, b, err) }
}
