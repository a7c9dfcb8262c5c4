// Command homeauto is an example host app for the runtime API's app tools (issue 19 item
// 3; apptools): a home-automation service that lets the assistant turn on the lights for
// its own users. It declares turn_on_lights with its runtime key, then serves the signed
// callbacks, verifying each before touching a light: with PA_ISSUER, the issuer's JWT
// (apptools.TokenVerifier: public keys from PA_URL/api/v1/jwks, 5-minute lifetime, replays
// refused), so the app keeps no shared secret; with PA_CALLBACK_SECRET, the HMAC
// (apptools.Verifier); with both, both.
//
//	PA_URL=https://assistant.example.com PA_ISSUER=https://assistant.example.com \
//	  homeauto -listen :8123 -callback https://home.example.com/pa/lights
//
// PA_CALLBACK_SECRET is the signing secret the first declaration answered (shown once).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"log"
	"net/http"
	"os"
	"strings"
	"sync"

	"privateassistant/apptools"
	"privateassistant/issuer"
)

// Schema is turn_on_lights's arguments.
const Schema = `{"type":"object","properties":{"room":{"type":"string","enum":["kitchen","living room","hall"],"description":"the room"}},"required":["room"],"additionalProperties":false}`

// Lights is the home: which rooms are lit, per user of the app.
type Lights struct {
	mu sync.Mutex
	on map[string]map[string]bool // response → room → on (a real app maps the response to its user)
}

// Handler serves the callbacks; every request has passed the Verifier already.
func (l *Lights) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var cb apptools.Callback
		if err := json.NewDecoder(r.Body).Decode(&cb); err != nil || cb.Tool != "turn_on_lights" {
			http.Error(w, `{"error":"unknown call"}`, http.StatusBadRequest)
			return
		}
		var args struct {
			Room string `json:"room"`
		}
		if err := json.Unmarshal(cb.Arguments, &args); err != nil || args.Room == "" {
			http.Error(w, `{"error":"room is required"}`, http.StatusBadRequest)
			return
		}
		l.mu.Lock()
		if l.on == nil {
			l.on = map[string]map[string]bool{}
		}
		if l.on[cb.Response] == nil {
			l.on[cb.Response] = map[string]bool{}
		}
		l.on[cb.Response][args.Room] = true
		l.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"room": args.Room, "lights": "on"})
	})
}

// IsOn reports whether the lights of room are on for the response's user.
func (l *Lights) IsOn(response, room string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.on[response][room]
}

// Declaration is what the app declares with its key (POST /api/v1/tools).
func Declaration(callback string) []apptools.Tool {
	return []apptools.Tool{{Name: "turn_on_lights", Description: "Turn on the lights in a room of the user's home.",
		Schema: json.RawMessage(Schema), CallbackURL: callback}}
}

// Verified wraps h in the checks the configuration asks for: the issuer's JWT when issuer
// is set (keys from base/api/v1/jwks), the HMAC when secret is set; at least one.
func Verified(h http.Handler, base, issuerName, secret, callback string) (http.Handler, error) {
	if issuerName == "" && secret == "" {
		return nil, errors.New("set PA_ISSUER (verify the issuer's JWT; needs PA_URL) or PA_CALLBACK_SECRET (the HMAC secret the declaration answered)")
	}
	if secret != "" {
		h = (&apptools.Verifier{Secret: []byte(secret)}).Middleware(h)
	}
	if issuerName != "" {
		if base == "" {
			return nil, errors.New("PA_URL: the assistant's address, where its public keys are (/api/v1/jwks)")
		}
		tv := &apptools.TokenVerifier{Issuer: issuerName, Audience: "homeauto", URL: callback,
			Keys: (&issuer.Fetcher{URL: strings.TrimRight(base, "/") + "/api/v1/jwks"}).Key}
		h = tv.Middleware(h)
	}
	return h, nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8123", "address the callbacks arrive at")
	callback := flag.String("callback", "", "the callback URL as declared (checked against the token's htu)")
	flag.Parse()
	h, err := Verified((&Lights{}).Handler(), os.Getenv("PA_URL"), os.Getenv("PA_ISSUER"), os.Getenv("PA_CALLBACK_SECRET"), *callback)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /pa/lights", h)
	log.Printf("homeauto: callbacks on http://%s/pa/lights", *listen)
	log.Fatal(http.ListenAndServe(*listen, mux))
}
