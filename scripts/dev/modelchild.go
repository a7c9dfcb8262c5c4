package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// modelServerArg, as this binary's first argument, makes it one of the xtx's model
// servers instead of the dev stack: the GPU manager's process backend starts one per
// model it loads (gpuconfig.go) and stops it with SIGTERM when it unloads or swaps, as it
// would a llama-server. `make dev` and the package's tests re-execute their own binary
// (os.Executable), so nothing is built or fetched.
//
// A model server is a real process with its own port, load time (-load-time: it listens
// only after it) and context (-context, reported by /v1/models as llama-server does). Its
// answers come from the stack's scripted model (-upstream, the demo model on the origin,
// or MODEL_URL), so a script a test sets on the stack's model applies here too; the
// "model" of every answer is its own (-model), which is what the gateway records as the
// model served. It exits on SIGTERM, and by itself when the process that started it is
// gone (a make dev killed hard), so no model server outlives its stack. It writes its pid
// in -pid-dir while it runs (the stack stops what is left there when it closes).
const modelServerArg = "-pa-dev-model-server"

// runModelServer runs the model server and exits, when os.Args asks for it.
func runModelServer() {
	if len(os.Args) > 1 && os.Args[1] == modelServerArg {
		if err := modelServer(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "dev model server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

func modelServer(args []string) error {
	fs := flag.NewFlagSet("model-server", flag.ContinueOnError)
	model := fs.String("model", "", "the model this server serves (reported in /v1/models and every answer)")
	port := fs.Int("port", 0, "the port to listen on (127.0.0.1)")
	ctxLen := fs.Int64("context", 131072, "the context it serves")
	loadTime := fs.Duration("load-time", 0, "how long the model takes to load before the server listens")
	upstream := fs.String("upstream", "", "the scripted model's base URL (…/v1) that writes the answers")
	upstreamModel := fs.String("upstream-model", "", `the model asked of the upstream ("": this server's own)`)
	keyEnv := fs.String("key-env", "", "the environment variable holding the key callers (and the upstream) need")
	pidDir := fs.String("pid-dir", "", "where to write its pid while it runs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *model == "" || *port == 0 || *upstream == "" {
		return errors.New("-model, -port and -upstream are required")
	}
	key := ""
	if *keyEnv != "" {
		key = os.Getenv(*keyEnv)
	}
	if *pidDir != "" {
		p := filepath.Join(*pidDir, strconv.Itoa(os.Getpid()))
		if err := os.WriteFile(p, []byte(*model), 0o600); err != nil {
			return err
		}
		defer os.Remove(p)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx, orphaned := context.WithCancel(ctx)
	defer orphaned()
	parent := os.Getppid()
	go func() { // the process that started it is gone: it is reparented
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if os.Getppid() != parent {
					orphaned()
					return
				}
			}
		}
	}()
	select {
	case <-time.After(*loadTime):
	case <-ctx.Done():
		return nil
	}
	upModel := *upstreamModel
	if upModel == "" {
		upModel = *model
	}
	h := &modelProxy{model: *model, upstreamModel: upModel, context: *ctxLen, upstream: strings.TrimRight(*upstream, "/"), key: key}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(*port)))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// modelProxy serves one model: /health, /v1/models, and chat completions written by the
// upstream scripted model with this server's model in every answer.
type modelProxy struct {
	model, upstreamModel string
	context              int64
	upstream, key        string
}

func (p *modelProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.key != "" && r.Header.Get("Authorization") != "Bearer "+p.key {
		writeModelErr(w, 401, "invalid_api_key", "Incorrect API key provided")
		return
	}
	switch {
	case r.Method == "GET" && r.URL.Path == "/health":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`)
	case r.Method == "GET" && (r.URL.Path == "/v1/models" || r.URL.Path == "/models"):
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": []any{map[string]any{
			"id": p.model, "object": "model", "owned_by": "pa-dev", "context_length": p.context,
			"meta": map[string]any{"n_ctx": p.context, "n_ctx_train": p.context}}}})
	case r.Method == "POST" && (r.URL.Path == "/v1/chat/completions" || r.URL.Path == "/chat/completions"):
		p.chat(w, r)
	default:
		writeModelErr(w, 404, "not_found", "no such endpoint")
	}
}

func writeModelErr(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error", "code": code}})
}

func (p *modelProxy) chat(w http.ResponseWriter, r *http.Request) {
	var body map[string]json.RawMessage
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&body); err != nil {
		writeModelErr(w, 400, "invalid_request", "the body is not a JSON object")
		return
	}
	body["model"], _ = json.Marshal(p.upstreamModel)
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(r.Context(), "POST", p.upstream+"/chat/completions", bytes.NewReader(b))
	if err != nil {
		writeModelErr(w, 500, "internal", err.Error())
		return
	}
	req.Header.Set("Content-Type", "application/json")
	if p.key != "" {
		req.Header.Set("Authorization", "Bearer "+p.key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		writeModelErr(w, 502, "upstream_unavailable", err.Error())
		return
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.WriteHeader(resp.StatusCode)
	fl, _ := w.(http.Flusher)
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			_, _ = w.Write(p.ownModel(line))
			if fl != nil && len(bytes.TrimSpace(line)) == 0 {
				fl.Flush()
			}
		}
		if err != nil {
			if fl != nil {
				fl.Flush()
			}
			return
		}
	}
}

// ownModel puts this server's model in an answer (a whole JSON body or one SSE line).
func (p *modelProxy) ownModel(line []byte) []byte {
	prefix, data := []byte(nil), bytes.TrimSpace(line)
	if d, ok := bytes.CutPrefix(data, []byte("data:")); ok {
		prefix, data = []byte("data: "), bytes.TrimSpace(d)
	}
	if !bytes.HasPrefix(data, []byte("{")) {
		return line
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil || m["model"] == nil {
		return line
	}
	m["model"], _ = json.Marshal(p.model)
	out, _ := json.Marshal(m)
	out = append(prefix, out...)
	if bytes.HasSuffix(line, []byte("\n")) {
		out = append(out, '\n')
	}
	return out
}

// stopModelServers stops the model servers still running from dir (their pid files):
// SIGTERM to each one's process group, SIGKILL after 5 s, and waits until each is gone.
// A pid whose process is not a model server (reused) is left alone.
func stopModelServers(dir string) {
	ents, _ := os.ReadDir(dir)
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(modelServerArg)) {
			_ = os.Remove(filepath.Join(dir, e.Name()))
			continue
		}
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		pids = append(pids, pid)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for syscall.Kill(pid, 0) == nil {
			if time.Now().After(deadline) {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
				deadline = time.Now().Add(5 * time.Second)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
