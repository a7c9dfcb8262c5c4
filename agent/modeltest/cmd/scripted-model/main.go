// Command scripted-model serves the scripted OpenAI-compatible backend on its own: the
// demo model of the dev stack. Markers in a message pick a script (#tool, #artifact,
// #long, #fail, #drop, #xss); anything else is echoed back, token by token.
//
//	scripted-model -addr 127.0.0.1:9000 -model chat -token-delay 30ms
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"privateassistant/agent/modeltest"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9000", "listen address")
	model := flag.String("model", "chat", "model id reported by /v1/models")
	delay := flag.Duration("token-delay", 30*time.Millisecond, "delay between streamed tokens")
	flag.Parse()
	b := modeltest.New(*model)
	b.TokenDelay = *delay
	b.APIKey = os.Getenv("GATEWAY_API_KEY")
	fmt.Fprintln(os.Stderr, "scripted-model listening on http://"+*addr+"/v1")
	if err := (&http.Server{Addr: *addr, Handler: b, ReadHeaderTimeout: 10 * time.Second}).ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "scripted-model:", err)
		os.Exit(1)
	}
}
