package gpu

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"privateassistant/internal/startstop"
	"privateassistant/queue"
	"privateassistant/schema"
)

// Publisher reports a device's status: to Redis every heartbeat (the hash /api/system
// reads: a heartbeat older than its stale bound reads as unknown), and to the gpu_status
// record in Appwrite when something a user would notice changed and at a slow interval.
type Publisher struct {
	RDB        redis.UniversalClient
	Store      *schema.Store // nil: Redis only
	Host       string
	Manager    *Manager
	Lease      *ControlLease                   // optional: the holder and generation shown
	QueueDepth func(ctx context.Context) int64 // optional: the device queue's pending runs
	Every      time.Duration                   // default 2 s
	SlowEvery  time.Duration                   // default 60 s
	Log        *slog.Logger

	r        startstop.Runner
	lastKey  string // publisher goroutine only
	lastSlow time.Time
}

var unsafeID = regexp.MustCompile(`[^a-zA-Z0-9._-]`)

// StatusDocID is the gpu_status record of a device.
func StatusDocID(device string) string {
	id := "gpu-" + unsafeID.ReplaceAllString(device, "-")
	if len(id) > 36 {
		id = id[:36]
	}
	return id
}

// Start publishes at once, then every Every and whenever the manager's state changed,
// until Stop or the end of ctx.
func (p *Publisher) Start(ctx context.Context) error {
	every := p.Every
	if every <= 0 {
		every = 2 * time.Second
	}
	log := p.log().With("device", p.Manager.dev.Name)
	return p.r.Start(ctx, func(ctx context.Context) {
		// Every interval, and at once when the manager's state changed (Manager.Changed).
		t := time.NewTicker(every)
		defer t.Stop()
		var lastMsg string
		for {
			if err := p.Publish(ctx, time.Now()); err != nil && ctx.Err() == nil {
				if msg := err.Error(); msg != lastMsg {
					log.Warn("gpu status publish failed", "err", err)
					lastMsg = msg
				}
			} else {
				lastMsg = ""
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-p.Manager.Changed():
			}
		}
	})
}

// Stop ends publishing and waits for the publisher's goroutine. Idempotent.
func (p *Publisher) Stop() { p.r.Stop() }

var _ startstop.Service = (*Publisher)(nil)

func (p *Publisher) log() *slog.Logger {
	if p.Log != nil {
		return p.Log
	}
	return slog.Default()
}

// Publish writes one heartbeat (and the Appwrite record when due). A manager without
// control of its device (fenced: another agent holds the control lease) publishes
// nothing: the device's status is the controlling agent's to write, and when nobody
// controls it the last heartbeat ages into unknown.
func (p *Publisher) Publish(ctx context.Context, now time.Time) error {
	s := p.Manager.Snapshot()
	if s.Phase == PhaseFenced {
		return nil
	}
	rec := schema.GPUStatus{Device: s.Device, Host: p.Host, State: RecordState(s.Phase), HeartbeatAt: now.UTC().Format(time.RFC3339Nano)}
	if s.Loaded != "" {
		l := s.Loaded
		rec.LoadedModel = &l
		if s.Active > 0 {
			rec.ActiveModel = &l
		}
	}
	if s.Reading.MemTotal > 0 {
		u, t := s.Reading.MemUsed, s.Reading.MemTotal
		rec.MemoryUsedBytes, rec.MemoryTotalBytes = &u, &t
		if s.Reading.TempC > 0 {
			c := s.Reading.TempC
			rec.TemperatureC = &c
		}
		if s.Reading.PowerW > 0 {
			w := s.Reading.PowerW
			rec.PowerW = &w
		}
	}
	if p.Lease != nil {
		h, g := p.Lease.Owner, p.Lease.Generation()
		rec.LeaseHolder, rec.LeaseGeneration = &h, &g
	}
	if p.QueueDepth != nil {
		d := p.QueueDepth(ctx)
		rec.QueueDepth = &d
	}
	fields := map[string]any{"host": rec.Host, "state": string(s.Phase), "heartbeatAt": rec.HeartbeatAt,
		"reason": s.Reason, "waiting": s.Waiting, "active": s.Active, "generation": s.Generation}
	put := func(k string, v any, ok bool) {
		if ok {
			fields[k] = v
		}
	}
	put("loadedModel", s.Loaded, rec.LoadedModel != nil)
	put("activeModel", s.Loaded, rec.ActiveModel != nil)
	if rec.MemoryTotalBytes != nil {
		put("memoryUsedBytes", *rec.MemoryUsedBytes, true)
		put("memoryTotalBytes", *rec.MemoryTotalBytes, true)
	}
	if rec.TemperatureC != nil {
		put("temperatureC", strconv.FormatFloat(*rec.TemperatureC, 'f', 1, 64), true)
	}
	if rec.PowerW != nil {
		put("powerW", strconv.FormatFloat(*rec.PowerW, 'f', 1, 64), true)
	}
	if rec.LeaseHolder != nil {
		put("leaseHolder", *rec.LeaseHolder, true)
		put("leaseGeneration", *rec.LeaseGeneration, true)
	}
	if rec.QueueDepth != nil {
		put("queueDepth", *rec.QueueDepth, true)
	}
	key := queue.GPUKey(s.Device)
	pipe := p.RDB.TxPipeline()
	pipe.SAdd(ctx, queue.GPUDevicesKey(), s.Device)
	pipe.Del(ctx, key) // fields that no longer apply (a model unloaded) must not linger
	pipe.HSet(ctx, key, fields)
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	if p.Store == nil {
		return nil
	}
	change := rec.State + "|" + s.Loaded + "|" + strconv.Itoa(s.Active) + "|" + strconv.FormatInt(s.Generation, 10)
	slow := p.SlowEvery
	if slow == 0 {
		slow = time.Minute
	}
	if change == p.lastKey && now.Sub(p.lastSlow) < slow {
		return nil
	}
	if err := p.writeRecord(ctx, rec); err != nil {
		return err
	}
	p.lastKey, p.lastSlow = change, now
	return nil
}

// RecordState is a phase as the gpu_status record's state (schema.GPUStates): draining
// reads busy there (its loaded model still serves the grants it waits for), fenced unknown
// (Publish writes none then). The Redis heartbeat, which /api/system shows, carries the
// phase itself.
func RecordState(ph Phase) string {
	switch ph {
	case PhaseDraining:
		return "busy"
	case PhaseFenced:
		return "unknown"
	}
	return string(ph)
}

func (p *Publisher) writeRecord(ctx context.Context, rec schema.GPUStatus) error {
	t := schema.For[schema.GPUStatus](p.Store, schema.CollGPUStatus)
	id := StatusDocID(rec.Device)
	patch := map[string]any{"host": rec.Host, "state": rec.State, "loadedModel": opt(rec.LoadedModel), "activeModel": opt(rec.ActiveModel),
		"memoryUsedBytes": opt(rec.MemoryUsedBytes), "memoryTotalBytes": opt(rec.MemoryTotalBytes), "temperatureC": opt(rec.TemperatureC),
		"powerW": opt(rec.PowerW), "leaseHolder": opt(rec.LeaseHolder), "leaseGeneration": opt(rec.LeaseGeneration),
		"queueDepth": opt(rec.QueueDepth), "heartbeatAt": rec.HeartbeatAt}
	_, err := t.Update(ctx, id, patch)
	if errors.Is(err, schema.ErrNotFound) {
		_, err = t.Create(ctx, id, "", &rec)
		if errors.Is(err, schema.ErrConflict) { // created meanwhile by a previous heartbeat
			_, err = t.Update(ctx, id, patch)
		}
	}
	return err
}

// opt is a patch value: the pointed-to value, or null.
func opt[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
