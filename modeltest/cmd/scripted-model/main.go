// Command scripted-model serves the scripted OpenAI-compatible backend on its own: the
// demo model of the dev stack, and the child process the GPU manager's tests load and
// unload. Markers in a message pick a script (#tool, #artifact, #long, #fail, #drop,
// #xss); anything else is echoed back, token by token.
//
//	scripted-model -addr 127.0.0.1:9000 -model chat -token-delay 30ms -prompt-delay 0 -load-time 0 -context 131072
//
// -load-time delays listening (a model load); SIGTERM shuts the server down gracefully.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"privateassistant/modeltest"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9000", "listen address")
	model := flag.String("model", "chat", "model id reported by /v1/models")
	delay := flag.Duration("token-delay", 30*time.Millisecond, "delay between streamed tokens")
	loadTime := flag.Duration("load-time", 0, "time before the server listens (a model load)")
	ctxLen := flag.Int("context", 131072, "context length reported by /v1/models")
	promptDelay := flag.Duration("prompt-delay", 0, "prompt processing time per prompt token (the backend's prompt speed)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	select {
	case <-time.After(*loadTime):
	case <-ctx.Done():
		return
	}
	b := modeltest.New(*model)
	b.TokenDelay = *delay
	b.ContextLength = *ctxLen
	b.PromptTokenDelay = *promptDelay
	b.APIKey = os.Getenv("GATEWAY_API_KEY")
	srv := &http.Server{Addr: *addr, Handler: b, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	fmt.Fprintln(os.Stderr, "scripted-model listening on http://"+*addr+"/v1")
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "scripted-model:", err)
		os.Exit(1)
	}
}
