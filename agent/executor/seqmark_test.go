package executor_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"privateassistant/agent/executor"
	"privateassistant/hermes/hermestest"
	"privateassistant/modeltest"
	"privateassistant/queue"
)

// appendRecorder sees the executor's Redis commands: each event append (the event log's
// fenced script) with the position it carries, and each separate position write.
type appendRecorder struct {
	mu       sync.Mutex
	appends  []recordedAppend
	seqSaves int
}

type recordedAppend struct {
	typ  string
	mark string // the native position written with it ("" none)
}

func (r *appendRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *appendRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (r *appendRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if name := cmd.Name(); (name != "evalsha" && name != "eval") || len(args) < 3 || err != nil {
			return err
		}
		n, _ := args[2].(int)
		keys := make([]string, 0, n)
		for i := 0; i < n && 3+i < len(args); i++ {
			k, _ := args[3+i].(string)
			keys = append(keys, k)
		}
		argv := args[3+n:]
		r.mu.Lock()
		defer r.mu.Unlock()
		switch {
		case n >= 3 && strings.HasSuffix(keys[1], ":events") && len(argv) >= 3 && cmd.(*redis.Cmd).Val() == int64(1):
			var ev queue.Event
			raw, _ := argv[2].([]byte)
			_ = json.Unmarshal(raw, &ev)
			a := recordedAppend{typ: ev.Type}
			if n == 4 && strings.HasSuffix(keys[3], ":nativeseq") {
				a.mark, _ = argv[7].(string)
			}
			r.appends = append(r.appends, a)
		case n == 2 && strings.HasSuffix(keys[1], ":nativeseq"):
			r.seqSaves++
		}
		return err
	}
}

// Every text delta the executor appends carries the native position it completes, written
// by the append's own fenced script: one round trip per flushed delta instead of two, and
// a position that never lands without its event (before, each flushed delta was followed
// by a second fenced write of the position, and a delta waiting for Redis could be
// overtaken by it).
func TestEveryDeltaCarriesItsNativePosition(t *testing.T) {
	hs := setupHermes(t, hermestest.Options{})
	rec := &appendRecorder{}
	hs.rdb.AddHook(rec)
	hs.model.SetScript("#marks", modeltest.Script{Turns: []modeltest.Turn{{Tokens: strings.Fields(strings.Repeat("tok ", 20)), TokenDelay: 3 * time.Millisecond}}})
	id := hs.newRunSaying(t, "go #marks")
	require.NoError(t, hs.exec.Execute(context.Background(), id))

	rec.mu.Lock()
	defer rec.mu.Unlock()
	var deltas int
	var last string
	for _, a := range rec.appends {
		if a.typ != queue.EventMessageDelta {
			continue
		}
		deltas++
		require.NotEmpty(t, a.mark, "delta %d was appended without its native position", deltas)
		last = a.mark
	}
	require.Positive(t, deltas)
	native, seq, ok := strings.Cut(last, " ")
	require.True(t, ok, last)
	require.NotEmpty(t, native)
	require.NotEqual(t, "-1", seq)
	// The stored position is at or past the last delta's (later events may move it on).
	got, err := hs.rdb.Get(context.Background(), executor.NativeSeqKey(id)).Result()
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(got, native+" "), got)
}
