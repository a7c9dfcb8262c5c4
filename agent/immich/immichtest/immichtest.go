// Package immichtest is an Immich server double for the queue API the agent uses, as
// contracts/gpu.md §6 describes it: x-api-key auth (admin key), GET/PUT /api/queues/{name}
// with {name, isPaused, statistics:{active,…}} (v2.3+), and the deprecated
// GET /api/jobs / PUT /api/jobs/{name} {"command": …} when Legacy is set (the queues
// API then answers 404). Pausing a queue stops new work; active jobs run to completion
// (the test finishes them with Finish). backgroundTask cannot be paused (400).
package immichtest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

var queueNames = []string{"thumbnailGeneration", "metadataExtraction", "videoConversion", "faceDetection",
	"facialRecognition", "smartSearch", "duplicateDetection", "backgroundTask", "storageTemplateMigration",
	"migration", "search", "sidecar", "library", "notifications", "backupDatabase", "ocr", "workflow", "editor"}

type queue struct {
	Paused bool
	Active int
}

// Server is the double.
type Server struct {
	*httptest.Server
	Key    string
	Legacy bool

	mu     sync.Mutex
	queues map[string]*queue
	calls  []string
}

// Start runs a double with key as its admin API key.
func Start(t testing.TB, key string, legacy bool) *Server {
	s := New(key, legacy)
	s.Server = httptest.NewServer(s)
	t.Cleanup(s.Close)
	return s
}

// New makes a double that listens nowhere: serve it on a mux of your own (the dev stack
// mounts it on its origin). Its embedded httptest.Server is nil.
func New(key string, legacy bool) *Server {
	s := &Server{Key: key, Legacy: legacy, queues: map[string]*queue{}}
	for _, n := range queueNames {
		s.queues[n] = &queue{}
	}
	return s
}

// SetActive sets a queue's running jobs.
func (s *Server) SetActive(name string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queues[name].Active = n
}

// Paused reports whether a queue is paused.
func (s *Server) Paused(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queues[name].Paused
}

// Calls lists "METHOD path" of every authorized call.
func (s *Server) Calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("x-api-key") != s.Key {
		writeJSON(w, 401, map[string]any{"message": "Invalid API key", "statusCode": 401})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, r.Method+" "+r.URL.Path)
	path := r.URL.Path
	switch {
	case strings.HasPrefix(path, "/api/queues/") && !s.Legacy:
		name := strings.TrimPrefix(path, "/api/queues/")
		q := s.queues[name]
		if q == nil {
			writeJSON(w, 400, map[string]any{"message": "name must be one of the queue names", "statusCode": 400})
			return
		}
		if r.Method == "PUT" {
			var b struct {
				IsPaused *bool `json:"isPaused"`
			}
			if json.NewDecoder(r.Body).Decode(&b) != nil || b.IsPaused == nil {
				writeJSON(w, 400, map[string]any{"message": "isPaused must be a boolean", "statusCode": 400})
				return
			}
			if name == "backgroundTask" && *b.IsPaused {
				writeJSON(w, 400, map[string]any{"message": "backgroundTask cannot be paused", "statusCode": 400})
				return
			}
			q.Paused = *b.IsPaused
		} else if r.Method != "GET" {
			writeJSON(w, 405, map[string]any{"statusCode": 405})
			return
		}
		writeJSON(w, 200, map[string]any{"name": name, "isPaused": q.Paused,
			"statistics": map[string]int{"active": q.Active, "completed": 0, "failed": 0, "delayed": 0, "waiting": 0, "paused": 0}})
	case path == "/api/jobs" && r.Method == "GET":
		out := map[string]any{}
		for n, q := range s.queues {
			out[n] = map[string]any{"queueStatus": map[string]bool{"isActive": q.Active > 0, "isPaused": q.Paused},
				"jobCounts": map[string]int{"active": q.Active, "completed": 0, "failed": 0, "delayed": 0, "waiting": 0, "paused": 0}}
		}
		writeJSON(w, 200, out)
	case strings.HasPrefix(path, "/api/jobs/") && r.Method == "PUT":
		q := s.queues[strings.TrimPrefix(path, "/api/jobs/")]
		var b struct {
			Command string `json:"command"`
		}
		if q == nil || json.NewDecoder(r.Body).Decode(&b) != nil {
			writeJSON(w, 400, map[string]any{"message": "bad request", "statusCode": 400})
			return
		}
		switch b.Command {
		case "pause":
			q.Paused = true
		case "resume":
			q.Paused = false
		case "start", "empty", "clear-failed":
		default:
			writeJSON(w, 400, map[string]any{"message": "command must be a valid enum value", "statusCode": 400})
			return
		}
		writeJSON(w, 200, map[string]any{"queueStatus": map[string]bool{"isActive": q.Active > 0, "isPaused": q.Paused}})
	default:
		writeJSON(w, 404, map[string]any{"message": "Cannot " + r.Method + " " + path, "statusCode": 404})
	}
}
