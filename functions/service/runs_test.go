package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/appwrite/sdk-for-go/file"
	"github.com/appwrite/sdk-for-go/permission"
	"github.com/appwrite/sdk-for-go/role"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionstest"
	"privateassistant/queue"
	"privateassistant/schema"
	"privateassistant/schema/schematest"
)

type batch struct {
	Events   []queue.Event
	Next     int64
	Status   string
	Terminal bool
}

func admitOne(t *testing.T, env *functionstest.Env, jwt, conv, req string) admitted {
	t.Helper()
	res := env.Do(t, "POST", "/api/conversations/"+conv+"/messages", jwt, map[string]any{"requestId": req, "text": "hello"})
	require.Equal(t, 202, res.Status, string(res.Body))
	var a admitted
	res.JSON(t, &a)
	return a
}

// emit plays the executor: Redis stream + hot state, and the durable copy in Appwrite.
func emit(t *testing.T, env *functionstest.Env, owner, runID string, seq int64, typ string, status string) {
	t.Helper()
	ctx := context.Background()
	rdb := env.Redis.Client()
	defer rdb.Close()
	data, _ := json.Marshal(map[string]any{"n": seq})
	ev := queue.Event{Sequence: seq, Type: typ, Data: data, At: time.Now().UTC()}
	_, err := schema.For[schema.Event](env.Store, schema.CollEvents).Create(ctx, schema.EventDocID(runID, seq), owner,
		&schema.Event{OwnerID: owner, RunID: runID, Sequence: seq, Type: typ, Data: schema.Ptr(string(data))})
	require.NoError(t, err)
	require.NoError(t, queue.AppendEvent(ctx, rdb, runID, ev))
	require.NoError(t, queue.SetRunState(ctx, rdb, runID, queue.RunState{Status: status, Terminal: schema.IsTerminal(status), HeartbeatAt: time.Now(), LastSequence: seq}))
	schematest.SetRunStatus(t, env.Store, runID, schema.RunStatus(status), map[string]any{"lastSequence": seq})
}

func poll(t *testing.T, env *functionstest.Env, jwt, runID string, after int64, wait string) batch {
	t.Helper()
	res := env.Do(t, "GET", fmt.Sprintf("/api/runs/%s/events?after=%d&wait=%s", runID, after, wait), jwt, nil)
	require.Equal(t, 200, res.Status, string(res.Body))
	var b batch
	res.JSON(t, &b)
	return b
}

func TestLongPollWakesResumesAndFallsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := functionstest.New(t)
	owner, jwt := env.SignUp(t, "lp@example.com", "password-lplp")
	conv := env.Conversation(t, jwt)
	a := admitOne(t, env, jwt, conv, "r1")

	// Nothing yet: an immediate poll answers empty with the record's status.
	b := poll(t, env, jwt, a.RunID, 0, "0")
	require.Empty(t, b.Events)
	require.Equal(t, "queued", b.Status)
	require.False(t, b.Terminal)

	// A waiting poll wakes on the append, long before its 20 s wait.
	got := make(chan batch, 1)
	start := time.Now()
	go func() { got <- poll(t, env, jwt, a.RunID, 0, "20") }()
	time.Sleep(100 * time.Millisecond) // give the poll time to block; correctness does not depend on it
	emit(t, env, owner, a.RunID, 1, queue.EventRunStatus, "running")
	select {
	case b = <-got:
	case <-time.After(15 * time.Second):
		t.Fatal("long-poll did not wake on an append")
	}
	require.Less(t, time.Since(start), 10*time.Second)
	require.Len(t, b.Events, 1)
	require.Equal(t, int64(1), b.Next)

	for seq := int64(2); seq <= 9; seq++ {
		emit(t, env, owner, a.RunID, seq, queue.EventMessageDelta, "running")
	}
	emit(t, env, owner, a.RunID, 10, queue.EventRunCompleted, "completed")

	// Resume from every cursor: contiguous, nothing skipped or repeated.
	for after := int64(0); after <= 10; after++ {
		b := poll(t, env, jwt, a.RunID, after, "0")
		require.Len(t, b.Events, int(10-after), "after=%d", after)
		for i, e := range b.Events {
			require.Equal(t, after+int64(i)+1, e.Sequence)
		}
		require.Equal(t, int64(10), b.Next)
		require.True(t, b.Terminal, "after=%d", after)
		require.Equal(t, "completed", b.Status)
	}

	// The stream forgets its head (trimmed): cursors older than it come from Appwrite.
	rdb := env.Redis.Client()
	defer rdb.Close()
	require.NoError(t, rdb.XTrimMinID(ctx, queue.EventsKey(a.RunID), "7-0").Err())
	for _, after := range []int64{0, 3, 6, 7} {
		b := poll(t, env, jwt, a.RunID, after, "0")
		require.Len(t, b.Events, int(10-after), "after=%d", after)
		for i, e := range b.Events {
			require.Equal(t, after+int64(i)+1, e.Sequence)
		}
		require.True(t, b.Terminal)
	}
	// Redis lost everything about the run: the record and Appwrite's events answer.
	require.NoError(t, rdb.Del(ctx, queue.EventsKey(a.RunID), queue.StateKey(a.RunID)).Err())
	b = poll(t, env, jwt, a.RunID, 4, "0")
	require.Len(t, b.Events, 6)
	require.Equal(t, int64(5), b.Events[0].Sequence)
	require.True(t, b.Terminal)
	require.Equal(t, "completed", b.Status)
}

func TestCancelQueuedRunSettlesIt(t *testing.T) {
	t.Parallel()
	env := functionstest.New(t)
	_, jwt := env.SignUp(t, "cq@example.com", "password-cqcq")
	conv := env.Conversation(t, jwt)
	a := admitOne(t, env, jwt, conv, "c")
	res := env.Do(t, "POST", "/api/runs/"+a.RunID+"/cancel", jwt, nil)
	require.Equal(t, 202, res.Status, string(res.Body))
	var c struct {
		Status          string
		CancelRequested bool
	}
	res.JSON(t, &c)
	require.Equal(t, "cancelled", c.Status)
	require.True(t, c.CancelRequested)
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: env.Redis.Addr})
	defer insp.Close()
	_, err := insp.GetTaskInfo("gpu:arc", a.RunID)
	require.ErrorIs(t, err, asynq.ErrTaskNotFound)
	b := poll(t, env, jwt, a.RunID, 0, "0")
	require.Len(t, b.Events, 1)
	require.Equal(t, queue.EventRunCancelled, b.Events[0].Type)
	require.True(t, b.Terminal)
	// Repeats are harmless.
	res = env.Do(t, "POST", "/api/runs/"+a.RunID+"/cancel", jwt, nil)
	require.Equal(t, 202, res.Status)
	res.JSON(t, &c)
	require.Equal(t, "cancelled", c.Status)
	// A re-submission of the same request does not resurrect it.
	again := admitOne(t, env, jwt, conv, "c")
	require.Equal(t, a.RunID, again.RunID)
	require.Equal(t, "cancelled", again.Status)
	_, err = insp.GetTaskInfo("gpu:arc", a.RunID)
	require.ErrorIs(t, err, asynq.ErrTaskNotFound)
}

func TestCancelRunningRunSignalsTheExecutor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := functionstest.New(t)
	_, jwt := env.SignUp(t, "cr@example.com", "password-crcr")
	conv := env.Conversation(t, jwt)
	// A worker that takes the task and holds it until its context is cancelled.
	started, cancelled := make(chan struct{}), make(chan struct{})
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: env.Redis.Addr}, asynq.Config{Concurrency: 1,
		Queues: map[string]int{"gpu:arc": 1}, TaskCheckInterval: 10 * time.Millisecond, LogLevel: asynq.FatalLevel})
	require.NoError(t, srv.Start(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		close(started)
		<-ctx.Done()
		close(cancelled)
		return ctx.Err()
	})))
	defer srv.Shutdown()
	a := admitOne(t, env, jwt, conv, "c")
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("worker never started")
	}
	res := env.Do(t, "POST", "/api/runs/"+a.RunID+"/cancel", jwt, nil)
	require.Equal(t, 202, res.Status)
	var c struct {
		Status          string
		CancelRequested bool
	}
	res.JSON(t, &c)
	require.Equal(t, "queued", c.Status, "not cancelled yet: the executor settles it")
	require.True(t, c.CancelRequested)
	select {
	case <-cancelled: // asynq's CancelProcessing fast path
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context was not cancelled")
	}
	rdb := env.Redis.Client()
	defer rdb.Close()
	cs, _, err := queue.ReadControl(ctx, rdb, a.RunID, "0", time.Millisecond)
	require.NoError(t, err)
	require.Len(t, cs, 1)
	require.Equal(t, queue.ControlCancel, cs[0].Type)
	run, err := schema.For[schema.Run](env.Store, schema.CollRuns).Get(ctx, a.RunID)
	require.NoError(t, err)
	require.True(t, run.CancelRequested, "the record of truth says cancel")
}

func TestApprovalIsExactAndRecordedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := functionstest.New(t)
	_, jwt := env.SignUp(t, "ap@example.com", "password-apap")
	conv := env.Conversation(t, jwt)
	a := admitOne(t, env, jwt, conv, "x")
	approve := func(req, choice string) functionstest.Response {
		return env.Do(t, "POST", "/api/runs/"+a.RunID+"/approval", jwt, map[string]any{"requestId": req, "choice": choice})
	}
	res := approve("req-1", "once")
	require.Equal(t, 409, res.Status)
	require.Equal(t, "approval_not_pending", res.ErrorCode())

	schematest.SetRunStatus(t, env.Store, a.RunID, schema.RunWaitingForApproval, nil)
	_, err := schema.For[schema.RunBinding](env.Store, schema.CollRunBindings).Update(ctx, a.RunID, map[string]any{"pendingApprovalId": "req-1"})
	require.NoError(t, err)

	res = approve("req-0", "once")
	require.Equal(t, 409, res.Status)
	require.Equal(t, "approval_request_mismatch", res.ErrorCode())
	res = approve("req-1", "once")
	require.Equal(t, 202, res.Status, string(res.Body))
	res = approve("req-1", "once")
	require.Equal(t, 202, res.Status, "a repeat is a no-op")
	res = approve("req-1", "deny")
	require.Equal(t, 409, res.Status)
	require.Equal(t, "approval_already_decided", res.ErrorCode())

	rdb := env.Redis.Client()
	defer rdb.Close()
	cs, _, err := queue.ReadControl(ctx, rdb, a.RunID, "0", time.Millisecond)
	require.NoError(t, err)
	require.Len(t, cs, 1, "delivered once")
	require.Equal(t, queue.Control{Type: queue.ControlApproval, RequestID: "req-1", Choice: "once", By: cs[0].By}, cs[0])
}

func TestDownloadIsOwnerCheckedRangedAndSafe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := functionstest.New(t)
	owner, jwt := env.SignUp(t, "dl@example.com", "password-dldl")
	_, other := env.SignUp(t, "dl2@example.com", "password-dl22")
	st := appwrite.NewStorage(env.Client)
	put := func(id, name string, data []byte) {
		p := filepath.Join(t.TempDir(), "f")
		require.NoError(t, os.WriteFile(p, data, 0o600))
		_, err := st.CreateFile(schema.BucketArtifacts, id, file.NewInputFile(p, name), st.WithCreateFilePermissions([]string{permission.Read(role.User(owner, ""))}))
		require.NoError(t, err)
	}
	data := []byte(strings.Repeat("0123456789", 1000))
	put("f1", "report.txt", data)
	put("f2", "page.html", []byte("<script>alert(1)</script>"))
	arts := schema.For[schema.Artifact](env.Store, schema.CollArtifacts)
	_, err := arts.Create(ctx, "a1", owner, &schema.Artifact{OwnerID: owner, ConversationID: "c", RunID: "r", Filename: "../../etc/re\"port\r\n.txt",
		MimeType: "text/plain", Size: int64(len(data)), Checksum: "x", BucketID: schema.BucketArtifacts, FileID: "f1"})
	require.NoError(t, err)
	_, err = arts.Create(ctx, "a2", owner, &schema.Artifact{OwnerID: owner, ConversationID: "c", RunID: "r", Filename: "page.html",
		MimeType: "text/html", Size: 25, Checksum: "y", BucketID: schema.BucketArtifacts, FileID: "f2"})
	require.NoError(t, err)

	res := env.Do(t, "GET", "/api/artifacts/a1/download", jwt, nil)
	require.Equal(t, 200, res.Status)
	require.Equal(t, data, res.Body)
	require.Equal(t, "text/plain; charset=utf-8", res.Header.Get("Content-Type"))
	cd := res.Header.Get("Content-Disposition")
	require.True(t, strings.HasPrefix(cd, "attachment;"), cd)
	require.NotContains(t, cd, "/")
	require.NotContains(t, cd, "\r")
	require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"))
	require.Equal(t, "private, no-store", res.Header.Get("Cache-Control"))

	res = env.Do(t, "GET", "/api/artifacts/a1/download", jwt, nil, "Range", "bytes=10-19")
	require.Equal(t, 206, res.Status)
	require.Equal(t, data[10:20], res.Body)
	require.Equal(t, fmt.Sprintf("bytes 10-19/%d", len(data)), res.Header.Get("Content-Range"))
	res = env.Do(t, "GET", "/api/artifacts/a1/download", jwt, nil, "Range", "bytes=999999-")
	require.Equal(t, 416, res.Status)

	res = env.Do(t, "GET", "/api/artifacts/a2/download", jwt, nil)
	require.Equal(t, 200, res.Status)
	require.Equal(t, "application/octet-stream", res.Header.Get("Content-Type"), "HTML never renders")
	require.True(t, strings.HasPrefix(res.Header.Get("Content-Disposition"), "attachment"))

	res = env.Do(t, "GET", "/api/artifacts/a1/download", other, nil)
	require.Equal(t, 404, res.Status)
	list := env.Do(t, "GET", "/api/artifacts?runId=r", jwt, nil)
	require.Equal(t, 200, list.Status)
	require.Contains(t, string(list.Body), `"a1"`)
	require.NotContains(t, string(list.Body), "bucket")
	require.NotContains(t, string(list.Body), "fileId")
}

// TestSystemShowsTheHotBeatOfTheSameMoment: the agent writes one beat to Redis (the phase
// itself, with its reason) and, on a change, to the gpu_status record (its enum's nearest
// state, its datetime in Appwrite's own format): the same beat shows the hot one, a newer
// record wins over an older hot beat.
func TestSystemShowsTheHotBeatOfTheSameMoment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := functionstest.New(t)
	_, jwt := env.SignUp(t, "beat@example.com", "password-beats")
	rdb := env.Redis.Client()
	defer rdb.Close()
	sec := time.Now().UTC().Truncate(time.Second)
	now := sec.Add(123456789) // .123456789: finer than Appwrite keeps
	recs := schema.For[schema.GPUStatus](env.Store, schema.CollGPUStatus)
	for _, d := range []struct {
		name     string
		hot, rec time.Time
	}{
		{"xtx", now, now},
		{"arc", now, now.Add(5 * time.Second)},
		// a whole second: RFC3339Nano writes no fraction ("…:05Z"), which as a string sorts
		// after the record's "…:05.500+00:00"
		{"nuc", sec, sec.Add(500 * time.Millisecond)},
	} {
		_, err := recs.Create(ctx, "gpu-"+d.name, "", &schema.GPUStatus{Device: d.name, Host: "h", State: "busy", HeartbeatAt: d.rec.Format(time.RFC3339Nano)})
		require.NoError(t, err)
		require.NoError(t, rdb.SAdd(ctx, queue.GPUDevicesKey(), d.name).Err())
		require.NoError(t, rdb.HSet(ctx, queue.GPUKey(d.name), "host", "h", "state", "draining", "reason", "swapping to demo-work",
			"heartbeatAt", d.hot.Format(time.RFC3339Nano)).Err())
	}
	res := env.Do(t, "GET", "/api/system", jwt, nil)
	require.Equal(t, 200, res.Status, string(res.Body))
	var sys struct {
		Devices []struct{ Device, State, Reason string }
	}
	res.JSON(t, &sys)
	got := map[string]string{}
	for _, d := range sys.Devices {
		got[d.Device] = d.State + "|" + d.Reason
	}
	require.Equal(t, "draining|swapping to demo-work", got["xtx"], "the same beat: the hot one")
	require.Equal(t, "busy|", got["arc"], "the record is newer")
	require.Equal(t, "busy|", got["nuc"], "the record is newer, by half a second")
}

func TestSystemShowsStaleAsUnknown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := functionstest.New(t)
	_, jwt := env.SignUp(t, "sys@example.com", "password-syss")
	conv := env.Conversation(t, jwt)
	admitOne(t, env, jwt, conv, "q1")
	rdb := env.Redis.Client()
	defer rdb.Close()
	now := time.Now().UTC()
	require.NoError(t, rdb.SAdd(ctx, queue.GPUDevicesKey(), "arc", "xtx").Err())
	require.NoError(t, rdb.HSet(ctx, queue.GPUKey("arc"), "host", "h1", "state", "busy", "loadedModel", "demo-chat", "activeModel", "demo-chat",
		"memoryUsedBytes", "1000", "memoryTotalBytes", "16000", "heartbeatAt", now.Format(time.RFC3339Nano)).Err())
	require.NoError(t, rdb.HSet(ctx, queue.GPUKey("xtx"), "host", "h2", "state", "idle", "loadedModel", "demo-work",
		"heartbeatAt", now.Add(-time.Hour).Format(time.RFC3339Nano)).Err())
	res := env.Do(t, "GET", "/api/system", jwt, nil)
	require.Equal(t, 200, res.Status, string(res.Body))
	var sys struct {
		Devices []struct {
			Device, State string
			LoadedModel   *string
			ActiveModel   *string
			Stale         bool
		}
		Queues []struct {
			Name    string
			Pending int
		}
	}
	res.JSON(t, &sys)
	require.Len(t, sys.Devices, 2)
	require.Equal(t, "busy", sys.Devices[0].State)
	require.False(t, sys.Devices[0].Stale)
	require.Equal(t, "demo-chat", *sys.Devices[0].ActiveModel)
	require.Equal(t, "unknown", sys.Devices[1].State, "a stale heartbeat is unknown, never idle")
	require.True(t, sys.Devices[1].Stale)
	require.Nil(t, sys.Devices[1].ActiveModel)
	require.Equal(t, "demo-work", *sys.Devices[1].LoadedModel)
	require.Len(t, sys.Queues, 1)
	require.Equal(t, "gpu:arc", sys.Queues[0].Name)
	require.Equal(t, 1, sys.Queues[0].Pending)
}
