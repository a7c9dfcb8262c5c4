package gpu

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionstest"
	"privateassistant/modeltest"
	"privateassistant/ops"
	"privateassistant/queue"
	"privateassistant/queue/redistest"
	"privateassistant/schema"
)

// TestStatusHeartbeats: the device's state reaches Redis every heartbeat and the
// gpu_status record on change; /api/system shows it, and a heartbeat that stops reads as
// unknown, never idle.
func TestStatusHeartbeats(t *testing.T) {
	env := functionstest.New(t)
	_, jwt := env.SignUp(t, "gpu@example.com", "password-gpus")
	rdb := env.Redis.Client()
	defer rdb.Close()
	ctx := context.Background()
	be := modeltest.New("demo-work")
	up := httptest.NewServer(be)
	defer up.Close()
	lease := &ControlLease{RDB: rdb, Device: "xtx", Owner: "heavy-host", TTL: 2 * time.Second}
	m := startManager(t, Device{Name: "xtx", Backend: &UpstreamBackend{URL: up.URL + "/v1"}, Lease: lease})
	require.Eventually(t, func() bool { return m.Snapshot().Phase == PhaseIdle }, 5*time.Second, 10*time.Millisecond)
	g, err := m.Acquire(ctx, "demo-work", nil)
	require.NoError(t, err)
	defer g.Release()

	p := &Publisher{RDB: rdb, Store: env.Store, Host: "heavy-host", Manager: m, Lease: lease,
		QueueDepth: func(context.Context) int64 { return 3 }}
	require.NoError(t, p.Publish(ctx, time.Now()))
	h, err := rdb.HGetAll(ctx, queue.GPUKey("xtx")).Result()
	require.NoError(t, err)
	require.Equal(t, string(PhaseReady), h["state"])
	require.Equal(t, "demo-work", h["activeModel"])
	require.Equal(t, "heavy-host", h["leaseHolder"])
	require.Equal(t, "3", h["queueDepth"])

	rec, err := schema.For[schema.GPUStatus](env.Store, schema.CollGPUStatus).Get(ctx, StatusDocID("xtx"))
	require.NoError(t, err)
	require.Equal(t, string(PhaseReady), rec.State)
	require.Equal(t, lease.Generation(), *rec.LeaseGeneration)

	var sys struct {
		Devices []struct {
			Device, State string
			ActiveModel   *string
			QueueDepth    *int64
			Stale         bool
		}
	}
	res := env.Do(t, "GET", "/api/system", jwt, nil)
	require.Equal(t, 200, res.Status, string(res.Body))
	res.JSON(t, &sys)
	require.Len(t, sys.Devices, 1)
	require.Equal(t, string(PhaseReady), sys.Devices[0].State)
	require.Equal(t, "demo-work", *sys.Devices[0].ActiveModel)
	require.False(t, sys.Devices[0].Stale)

	// The grant ends: the record follows (a change is written at once).
	g.Release()
	require.Eventually(t, func() bool { return m.Snapshot().Active == 0 }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, p.Publish(ctx, time.Now()))
	rec, err = schema.For[schema.GPUStatus](env.Store, schema.CollGPUStatus).Get(ctx, StatusDocID("xtx"))
	require.NoError(t, err)
	require.Nil(t, rec.ActiveModel, "loaded but not active")
	require.Equal(t, "demo-work", *rec.LoadedModel)
	h, _ = rdb.HGetAll(ctx, queue.GPUKey("xtx")).Result()
	require.NotContains(t, h, "activeModel", "fields that no longer apply are removed")

	// The agent stops beating (its last heartbeat, hot and in the record, is an hour old):
	// the device reads unknown.
	p.lastKey = ""
	require.NoError(t, p.Publish(ctx, time.Now().Add(-time.Hour)))
	res = env.Do(t, "GET", "/api/system", jwt, nil)
	res.JSON(t, &sys)
	require.Equal(t, "unknown", sys.Devices[0].State)
	require.True(t, sys.Devices[0].Stale)
}

// TestPublisherStartStop: Start publishes at once and on every beat in the background;
// Stop returns once the publisher's goroutine has exited (goleak checks none is left).
func TestPublisherStartStop(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	defer rdb.Close()
	m := startManager(t, Device{Name: "arc", Backend: &UpstreamBackend{URL: "http://127.0.0.1:1/v1"}})
	p := &Publisher{RDB: rdb, Host: "h", Manager: m, Every: 10 * time.Millisecond}
	require.NoError(t, p.Start(context.Background()))
	beat := func() string { return rdb.HGet(context.Background(), queue.GPUKey("arc"), "heartbeatAt").Val() }
	require.Eventually(t, func() bool { return beat() != "" }, 5*time.Second, 5*time.Millisecond)
	first := beat()
	require.Eventually(t, func() bool { return beat() != first }, 5*time.Second, 5*time.Millisecond, "it beats again")
	p.Stop()
	p.Stop() // idempotent
	require.Equal(t, string(PhaseIdle), rdb.HGet(context.Background(), queue.GPUKey("arc"), "state").Val())
}

// TestPublisherWritesAChangeAtOnce (issue 32 item 4): with a heartbeat interval of a
// minute, a change of what the heartbeat shows (a grant: the device becomes active, then
// not) reaches Redis within a second, not at the next beat.
func TestPublisherWritesAChangeAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	defer rdb.Close()
	ctx := context.Background()
	up := httptest.NewServer(modeltest.New("demo-work"))
	defer up.Close()
	m := startManager(t, Device{Name: "xtx", Backend: &UpstreamBackend{URL: up.URL + "/v1"}})
	require.Eventually(t, func() bool { return m.Snapshot().Phase == PhaseIdle }, 5*time.Second, 10*time.Millisecond)
	p := &Publisher{RDB: rdb, Host: "h", Manager: m, Every: time.Minute}
	require.NoError(t, p.Start(ctx))
	defer p.Stop()
	field := func(k string) string { return rdb.HGet(ctx, queue.GPUKey("xtx"), k).Val() }
	require.Eventually(t, func() bool { return field("state") == string(PhaseIdle) }, 5*time.Second, 5*time.Millisecond)
	g, err := m.Acquire(ctx, "demo-work", nil)
	require.NoError(t, err)
	asked := time.Now()
	require.Eventually(t, func() bool { return field("activeModel") == "demo-work" }, 5*time.Second, 5*time.Millisecond)
	require.Less(t, time.Since(asked), time.Second, "the grant is written at once")
	g.Release()
	released := time.Now()
	require.Eventually(t, func() bool { return field("activeModel") == "" && field("active") == "0" }, 5*time.Second, 5*time.Millisecond)
	require.Less(t, time.Since(released), time.Second, "the release is written at once")
}

// TestStatusIsTheControllingAgents: two agents configured for one device (a standby, or a
// restarted agent before the old lease expires): only the one holding the control lease
// publishes; the fenced one neither overwrites the heartbeat nor the record. And every
// phase the manager can be in is a state the gpu_status record accepts (its enum predates
// draining and fenced: before, a draining device's record write was refused every beat).
func TestStatusIsTheControllingAgents(t *testing.T) {
	env := functionstest.New(t)
	rdb := env.Redis.Client()
	defer rdb.Close()
	ctx := context.Background()
	up := httptest.NewServer(modeltest.New("demo-work"))
	defer up.Close()
	leaseA := &ControlLease{RDB: rdb, Device: "xtx", Owner: "host-a", TTL: 2 * time.Second}
	a := startManager(t, Device{Name: "xtx", Backend: &UpstreamBackend{URL: up.URL + "/v1"}, Lease: leaseA})
	require.Eventually(t, func() bool { return a.Snapshot().Phase == PhaseIdle }, 5*time.Second, 10*time.Millisecond)
	leaseB := &ControlLease{RDB: rdb, Device: "xtx", Owner: "host-b", TTL: 2 * time.Second}
	b := startManager(t, Device{Name: "xtx", Backend: &UpstreamBackend{URL: up.URL + "/v1"}, Lease: leaseB})
	require.Equal(t, PhaseFenced, b.Snapshot().Phase)

	pa := &Publisher{RDB: rdb, Store: env.Store, Host: "host-a", Manager: a, Lease: leaseA}
	pb := &Publisher{RDB: rdb, Store: env.Store, Host: "host-b", Manager: b, Lease: leaseB}
	now := time.Now()
	require.NoError(t, pa.Publish(ctx, now))
	require.NoError(t, pb.Publish(ctx, now.Add(time.Second)))
	h, err := rdb.HGetAll(ctx, queue.GPUKey("xtx")).Result()
	require.NoError(t, err)
	require.Equal(t, "host-a", h["host"])
	require.Equal(t, string(PhaseIdle), h["state"])
	rec, err := schema.For[schema.GPUStatus](env.Store, schema.CollGPUStatus).Get(ctx, StatusDocID("xtx"))
	require.NoError(t, err)
	require.Equal(t, "host-a", rec.Host)
	require.Equal(t, string(PhaseIdle), rec.State)

	var names []string
	for _, ph := range Phases {
		names = append(names, string(ph))
	}
	require.Equal(t, ops.GPUPhases, names, "the ops collector reports every phase")
	for _, ph := range Phases {
		require.Contains(t, schema.GPUStates, RecordState(ph), ph)
		require.NoError(t, pa.writeRecord(ctx, schema.GPUStatus{Device: "phase-" + string(ph), Host: "host-a", State: RecordState(ph),
			HeartbeatAt: now.UTC().Format(time.RFC3339Nano)}), "the record takes %s", ph)
	}
}
