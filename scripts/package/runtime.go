package main

// runtimeServer is the check's stand-in for open-runtimes' Go server (runtimes/go,
// v5): a net/http server that verifies x-open-runtimes-secret, builds the
// types-for-go Context from the request (lower-cased headers, first value only,
// x-open-runtimes-* removed), races handler.Main against x-open-runtimes-timeout, and
// replays the response. It imports the bundle exactly as the real one does: as module
// openruntimes/handler through a replace directive.
const runtimeServer = `package main

import (
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/open-runtimes/types-for-go/v4/openruntimes"
	handler "openruntimes/handler"
)

func main() {
	secret := os.Getenv("OPEN_RUNTIMES_SECRET")
	port := os.Getenv("PORT")
	if port == "" {
		port = "3000"
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/__opr/health", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("OK")) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if secret != "" && r.Header.Get("x-open-runtimes-secret") != secret {
			w.WriteHeader(500)
			_, _ = w.Write([]byte("Unauthorized. Provide correct \"x-open-runtimes-secret\" header."))
			return
		}
		timeout := 15
		if t, err := strconv.Atoi(r.Header.Get("x-open-runtimes-timeout")); err == nil && t > 0 {
			timeout = t
		}
		body, _ := io.ReadAll(r.Body)
		ctx := openruntimes.NewContext(openruntimes.Logger{})
		headers := map[string]string{}
		for k, v := range r.Header {
			lk := strings.ToLower(k)
			if strings.HasPrefix(lk, "x-open-runtimes-") || len(v) == 0 {
				continue
			}
			headers[lk] = v[0]
		}
		ctx.Req.Headers = headers
		ctx.Req.Method = r.Method
		ctx.Req.Path = r.URL.Path
		ctx.Req.QueryString = r.URL.RawQuery
		ctx.Req.Query = map[string]string{}
		for k, v := range r.URL.Query() {
			ctx.Req.Query[k] = v[0]
		}
		ctx.Req.Scheme = "http"
		ctx.Req.Host = r.Host
		ctx.Req.Url = "http://" + r.Host + r.URL.RequestURI()
		ctx.Req.SetBodyBinary(body)
		done := make(chan openruntimes.Response, 1)
		go func() {
			defer func() {
				if p := recover(); p != nil {
					done <- openruntimes.Response{StatusCode: 500}
				}
			}()
			done <- handler.Main(ctx)
		}()
		var res openruntimes.Response
		select {
		case res = <-done:
		case <-time.After(time.Duration(timeout) * time.Second):
			w.WriteHeader(500)
			return
		}
		ct := "text/plain"
		for k, v := range res.Headers {
			lk := strings.ToLower(k)
			if strings.HasPrefix(lk, "x-open-runtimes-") {
				continue
			}
			if lk == "content-type" {
				ct = v
				continue
			}
			w.Header().Set(lk, v)
		}
		if !strings.Contains(ct, "charset") && !strings.HasPrefix(ct, "multipart/") {
			ct += "; charset=utf-8"
		}
		w.Header().Set("content-type", ct)
		status := res.StatusCode
		if status == 0 {
			status = 200
		}
		w.WriteHeader(status)
		_, _ = w.Write(res.Body)
	})
	_ = http.ListenAndServe("127.0.0.1:"+port, http.MaxBytesHandler(mux, 20<<20))
}
`

// serverGoMod is the runtime's server module, with the bundle replacing the handler.
func serverGoMod(bundleDir string) string {
	return "module openruntimes/server\n\ngo " + GoDirective + "\n\nrequire (\n\tgithub.com/open-runtimes/types-for-go/v4 v4.0.8\n\topenruntimes/handler v0.0.0\n)\n\nreplace openruntimes/handler => " + bundleDir + "\n"
}
