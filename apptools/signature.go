package apptools

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The headers of a signed callback.
const (
	// HeaderTimestamp is the Unix time (seconds) the agent signed the callback at.
	HeaderTimestamp = "X-PA-Timestamp"
	// HeaderDelivery names the callback: 32 random hex digits, unique per delivery (the
	// nonce a verifier remembers to refuse a replay).
	HeaderDelivery = "X-PA-Delivery"
	// HeaderSignature is "v1=" and the hex HMAC-SHA256 of SignedPayload under the app's
	// signing secret.
	HeaderSignature = "X-PA-Signature"
)

// DefaultWindow is how far a callback's timestamp may be from the verifier's clock.
const DefaultWindow = 5 * time.Minute

// MaxBody bounds a callback body a verifier reads.
const MaxBody = 1 << 20

// Errors of verification; a host app answers each with 401 and does not act.
var (
	ErrUnsigned     = errors.New("apptools: callback is not signed")
	ErrBadSignature = errors.New("apptools: signature does not match")
	ErrStale        = errors.New("apptools: timestamp outside the replay window")
	ErrReplayed     = errors.New("apptools: delivery already seen")
)

// SignedPayload is what the signature covers: "v1", the timestamp, the delivery id and the
// exact body bytes, joined by ".". A changed byte of any of them changes the signature.
func SignedPayload(ts int64, delivery string, body []byte) []byte {
	var b bytes.Buffer
	b.WriteString("v1.")
	b.WriteString(strconv.FormatInt(ts, 10))
	b.WriteByte('.')
	b.WriteString(delivery)
	b.WriteByte('.')
	b.Write(body)
	return b.Bytes()
}

// Signature is the HeaderSignature value of a payload.
func Signature(secret []byte, ts int64, delivery string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(SignedPayload(ts, delivery, body))
	return "v1=" + hex.EncodeToString(m.Sum(nil))
}

// NewDelivery makes a delivery id.
func NewDelivery() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Sign sets the three headers on a callback request whose body is body.
func Sign(h http.Header, secret []byte, now time.Time, delivery string, body []byte) {
	ts := now.Unix()
	h.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	h.Set(HeaderDelivery, delivery)
	h.Set(HeaderSignature, Signature(secret, ts, delivery, body))
}

// Verifier checks signed callbacks for a host app: the signature (constant-time), the
// timestamp within Window of Now, and a delivery id not seen within the window. Safe for
// concurrent use.
type Verifier struct {
	Secret []byte
	Window time.Duration    // 0: DefaultWindow
	Now    func() time.Time // nil: time.Now

	mu   sync.Mutex
	seen map[string]time.Time // delivery → when it may be forgotten
}

func (v *Verifier) window() time.Duration {
	if v.Window > 0 {
		return v.Window
	}
	return DefaultWindow
}

func (v *Verifier) now() time.Time {
	if v.Now != nil {
		return v.Now()
	}
	return time.Now()
}

// Verify checks a callback's headers and body. Only a callback that passes every check
// marks its delivery as seen: a forged one cannot burn a genuine delivery id.
func (v *Verifier) Verify(h http.Header, body []byte) error {
	tsText, delivery, sig := h.Get(HeaderTimestamp), h.Get(HeaderDelivery), h.Get(HeaderSignature)
	if tsText == "" || delivery == "" || sig == "" {
		return ErrUnsigned
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil || len(delivery) > 128 {
		return ErrUnsigned
	}
	want := Signature(v.Secret, ts, delivery, body)
	if !hmac.Equal([]byte(want), []byte(strings.TrimSpace(sig))) {
		return ErrBadSignature
	}
	now := v.now()
	at := time.Unix(ts, 0)
	if d := now.Sub(at); d > v.window() || d < -v.window() {
		return fmt.Errorf("%w (%s off)", ErrStale, d.Round(time.Second))
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.seen == nil {
		v.seen = map[string]time.Time{}
	}
	for id, until := range v.seen { // forget what the window already refuses
		if now.After(until) {
			delete(v.seen, id)
		}
	}
	if _, dup := v.seen[delivery]; dup {
		return ErrReplayed
	}
	// Kept until its timestamp leaves the window: after that, ErrStale refuses it.
	v.seen[delivery] = at.Add(v.window())
	return nil
}

// Middleware verifies every request before next sees it: 401 with a JSON error when a
// check fails (next never runs), otherwise next reads the same body.
func (v *Verifier) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
		if err != nil || len(body) > MaxBody {
			http.Error(w, `{"error":"body unreadable or too large"}`, http.StatusRequestEntityTooLarge)
			return
		}
		if err := v.Verify(r.Header, body); err != nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"error":%q}`, err.Error())
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}
