package mcpjobs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"privateassistant/agent/gateway"
	"privateassistant/internal/backoff"
	"privateassistant/queue"
)

// The tools' names as the server publishes them.
const (
	ToolEnqueue = "enqueue_job"
	ToolStatus  = "job_status"
	ToolList    = "list_jobs"
	// ToolApp calls a tool of the host app that started the run (apptools; apps.go).
	ToolApp = "app_tool"
)

var tools = []string{ToolEnqueue, ToolStatus, ToolList, ToolApp}

// Errors a caller may branch on.
var (
	// ErrNoMatchingCall: no answer the gateway served made this call.
	ErrNoMatchingCall = errors.New("mcpjobs: no tool call of a run matches this call")
	// ErrAmbiguous: calls with these arguments of runs of different owners are pending.
	ErrAmbiguous = errors.New("mcpjobs: the same call is pending for more than one user")
)

// EnqueueArgs are enqueue_job's arguments.
type EnqueueArgs struct {
	Role         string `json:"role" jsonschema:"the work role that runs the job, e.g. research or coding"`
	Instructions string `json:"instructions" jsonschema:"what the job must do, complete and self-contained: the job does not see this conversation"`
	Title        string `json:"title,omitempty" jsonschema:"a short title for the job"`
}

// StatusArgs are job_status's arguments.
type StatusArgs struct {
	Job string `json:"job" jsonschema:"the job id enqueue_job or list_jobs answered"`
}

// ListArgs are list_jobs's arguments (none).
type ListArgs struct{}

// AppArgs are app_tool's arguments.
type AppArgs struct {
	Name      string `json:"name" jsonschema:"the application tool's name, as the instructions list it"`
	Arguments any    `json:"arguments,omitempty" jsonschema:"the tool's arguments: an object matching its schema"`
}

// canonical is the fingerprint's input: the arguments as the tool reads them (unknown
// fields, key order and spacing do not matter).
func canonical(tool, args string) (string, bool) {
	if strings.TrimSpace(args) == "" {
		args = "{}"
	}
	var v any
	switch tool {
	case ToolEnqueue:
		v = &EnqueueArgs{}
	case ToolStatus:
		v = &StatusArgs{}
	case ToolList:
		v = &ListArgs{}
	case ToolApp:
		v = &AppArgs{}
	default:
		return "", false
	}
	if json.Unmarshal([]byte(args), v) != nil {
		return "", false
	}
	b, _ := json.Marshal(v)
	return string(b), true
}

func fingerprint(tool, canon string) string {
	h := sha256.Sum256([]byte(tool + "\x00" + canon))
	return hex.EncodeToString(h[:16])
}

func pendingKey(fp string) string { return queue.MCPPendingKey(fp) }
func claimedKey(fp string) string { return queue.MCPClaimedKey(fp) }

// Registry keeps the pending calls of this server's tools the gateway saw.
type Registry struct {
	RDB redis.UniversalClient
	// Server is the MCP server's name in the Hermes profile ("pa"): Hermes names its tools
	// mcp__<server>__<tool>.
	Server string
	// PendingTTL is how long a call waits to be made (default 15 min); claimed calls are
	// kept 24 h for retries.
	PendingTTL time.Duration

	waiting func() // tests: a claim found no call and waits for one
}

func (r *Registry) pendingTTL() time.Duration {
	if r.PendingTTL > 0 {
		return r.PendingTTL
	}
	return 15 * time.Minute
}

// tool returns the short name of a model-side tool name of this server, or "".
func (r *Registry) tool(name string) string {
	rest, ok := strings.CutPrefix(name, "mcp__"+r.Server+"__")
	if !ok {
		return ""
	}
	for _, t := range tools {
		if rest == t {
			return t
		}
	}
	return ""
}

// Register is the gateway's CallSink: it keeps each call of this server's tools as
// pending for run.
func (r *Registry) Register(ctx context.Context, run string, calls []gateway.ToolCall) {
	_, _ = r.register(ctx, run, calls)
}

func (r *Registry) register(ctx context.Context, run string, calls []gateway.ToolCall) (int, error) {
	n := 0
	_, err := r.RDB.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range calls {
			t := r.tool(c.Name)
			if t == "" || run == "" || c.ID == "" {
				continue
			}
			canon, ok := canonical(t, c.Arguments)
			if !ok {
				continue // arguments the tool cannot read: the call fails at the tool anyway
			}
			k := pendingKey(fingerprint(t, canon))
			p.RPush(ctx, k, run+" "+c.ID)
			p.Expire(ctx, k, r.pendingTTL())
			n++
		}
		return nil
	})
	return n, err
}

// claimScript: KEYS pending, claimed; ARGV claimed TTL s. Moves the oldest pending call
// to the claimed list and returns it.
var claimScript = redis.NewScript(`
local c = redis.call('LPOP', KEYS[1])
if not c then return false end
redis.call('RPUSH', KEYS[2], c)
redis.call('LTRIM', KEYS[2], -100, -1)
redis.call('EXPIRE', KEYS[2], ARGV[1])
return c
`)

// entry is one registered call.
type entry struct{ Run, Call string }

func parseEntry(s string) entry {
	run, call, _ := strings.Cut(s, " ")
	return entry{Run: run, Call: call}
}

// claim finds the registered call a tools/call of tool with canon arguments answers:
// the oldest pending one, or (a retry) the newest claimed one. owner names each
// entry's run's owner. It waits up to wait for a registration in flight.
func (r *Registry) claim(ctx context.Context, tool, canon string, wait time.Duration, owner func(ctx context.Context, run string) (string, error)) (entry, error) {
	fp := fingerprint(tool, canon)
	deadline := time.Now().Add(wait)
	for {
		pending, err := r.RDB.LRange(ctx, pendingKey(fp), 0, -1).Result()
		if err != nil {
			return entry{}, fmt.Errorf("read pending calls: %w", err)
		}
		if len(pending) > 0 {
			who, err := oneOwner(ctx, pending, owner)
			if err != nil {
				return entry{}, err
			}
			got, err := claimScript.Run(ctx, r.RDB, []string{pendingKey(fp), claimedKey(fp)}, int((24 * time.Hour).Seconds())).Text()
			if errors.Is(err, redis.Nil) {
				continue // claimed by a concurrent call meanwhile: look again
			}
			if err != nil {
				return entry{}, fmt.Errorf("claim call: %w", err)
			}
			e := parseEntry(got)
			if o, err := owner(ctx, e.Run); err != nil || o != who {
				return entry{}, ErrAmbiguous // a call of another owner arrived in between
			}
			return e, nil
		}
		claimed, err := r.RDB.LRange(ctx, claimedKey(fp), 0, -1).Result()
		if err != nil {
			return entry{}, fmt.Errorf("read claimed calls: %w", err)
		}
		if len(claimed) > 0 {
			if _, err := oneOwner(ctx, claimed, owner); err != nil {
				return entry{}, err
			}
			return parseEntry(claimed[len(claimed)-1]), nil
		}
		if !time.Now().Before(deadline) {
			return entry{}, ErrNoMatchingCall
		}
		if r.waiting != nil {
			r.waiting()
		}
		if err := backoff.Sleep(ctx, 50*time.Millisecond); err != nil {
			return entry{}, err
		}
	}
}

// oneOwner returns the one owner of the entries' runs, or ErrAmbiguous.
func oneOwner(ctx context.Context, entries []string, owner func(ctx context.Context, run string) (string, error)) (string, error) {
	who := ""
	seen := map[string]bool{}
	for _, s := range entries {
		e := parseEntry(s)
		if seen[e.Run] {
			continue
		}
		seen[e.Run] = true
		o, err := owner(ctx, e.Run)
		if err != nil {
			return "", err
		}
		if who != "" && o != who {
			return "", ErrAmbiguous
		}
		who = o
	}
	return who, nil
}

// RequestID is the admission request id of the job a tool call enqueues: derived from the
// calling run and the call's id, so a retried call admits nothing new.
func RequestID(run, call string) string {
	h := sha256.Sum256([]byte("mcp-enqueue\x00" + run + "\x00" + call))
	return "mcp-" + hex.EncodeToString(h[:16])
}
