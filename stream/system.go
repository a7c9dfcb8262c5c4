package stream

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"privateassistant/functions/service"
	"privateassistant/schema"
)

// sysWatch is the process's one reader of the system panel's state (devices, queues,
// routes: service.SystemReader, the rules of GET /api/system). While someone watches it
// reads Redis every SystemEvery and the Appwrite records every SystemRecordsEvery, and
// when what a viewer would see changed it wakes every watcher; a watcher takes the latest
// state, as a member or as an admin. Nobody watching: it reads nothing.
type sysWatch struct {
	reader       service.SystemReader
	every        time.Duration
	recordsEvery time.Duration

	mu   sync.Mutex
	subs map[*sysSub]struct{}
	cur  *sysState
	wake chan struct{} // cap 1: the first watcher arrived

	// owned by run
	recs      []schema.GPUStatus
	routes    []schema.ModelRoute
	routesOK  bool
	recordsAt time.Time
	last      []byte // the admin's body without generatedAt, as last published
}

// sysState is one published state: the body for an admin and for a member.
type sysState struct {
	admin, member []byte
}

// sysSub is one watcher (a feed stream that asked for the panel). Its fields are guarded
// by the watch's mutex.
type sysSub struct {
	admin   bool
	seen    *sysState
	pending bool               // a state newer than seen is there
	cancel  context.CancelFunc // ends the watcher's wait on the feed, when it waits
}

func newSysWatch(reader service.SystemReader, every, recordsEvery time.Duration) *sysWatch {
	return &sysWatch{reader: reader, every: every, recordsEvery: recordsEvery, subs: map[*sysSub]struct{}{}, wake: make(chan struct{}, 1)}
}

func (w *sysWatch) subscribe(admin bool) *sysSub {
	sub := &sysSub{admin: admin}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.subs[sub] = struct{}{}
	sub.pending = w.cur != nil
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return sub
}

func (w *sysWatch) unsubscribe(sub *sysSub) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.subs, sub)
}

// take returns the body sub has not seen yet (nil when none), marking it seen.
func (w *sysWatch) take(sub *sysSub) []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	sub.pending = false
	if w.cur == nil || w.cur == sub.seen {
		return nil
	}
	sub.seen = w.cur
	if sub.admin {
		return w.cur.admin
	}
	return w.cur.member
}

// waitCtx is a context for one wait on the feed that a new state ends; done is called
// after the wait. When a state is already pending the context is ended at once.
func (w *sysWatch) waitCtx(ctx context.Context, sub *sysSub) (context.Context, func()) {
	wctx, cancel := context.WithCancel(ctx)
	w.mu.Lock()
	if sub.pending {
		cancel()
	} else {
		sub.cancel = cancel
	}
	w.mu.Unlock()
	return wctx, func() {
		w.mu.Lock()
		sub.cancel = nil
		w.mu.Unlock()
		cancel()
	}
}

func (w *sysWatch) publish(st *sysState) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cur = st
	for sub := range w.subs {
		sub.pending = true
		if sub.cancel != nil {
			sub.cancel()
			sub.cancel = nil
		}
	}
}

func (w *sysWatch) watched() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.subs) > 0
}

// run reads while someone watches, until ctx ends.
func (w *sysWatch) run(ctx context.Context) {
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		if !w.watched() {
			w.mu.Lock()
			w.cur, w.last = nil, nil // a first watcher gets a fresh read, never an old state
			w.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-w.wake:
				continue
			}
		}
		w.read(ctx, time.Now().UTC())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// read takes one look and publishes it if a viewer would see a change.
func (w *sysWatch) read(ctx context.Context, now time.Time) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if w.recordsAt.IsZero() || now.Sub(w.recordsAt) >= w.recordsEvery {
		// The records are the slow copy (a device with no hot heartbeat, the routes): a
		// failed read keeps the last good one.
		if recs, err := w.reader.GPURecords(rctx); err == nil {
			w.recs = recs
		}
		routes, err := w.reader.RouteRecords(rctx)
		if err == nil || !w.routesOK {
			w.routes, w.routesOK = routes, err == nil
		}
		w.recordsAt = now
	}
	if ctx.Err() != nil {
		return
	}
	body := w.reader.Assemble(rctx, now, w.recs, w.routes, w.routesOK)
	key, err := changeKey(body)
	if err != nil || string(key) == string(w.last) {
		return
	}
	w.last = key
	admin, _ := json.Marshal(body)
	service.StripAdmin(body)
	member, _ := json.Marshal(body)
	w.publish(&sysState{admin: admin, member: member})
}

// changeKey is what a change is judged on: the body without what moves by itself (the
// time it was made, each heartbeat's time, a queue's age), which go out as of the last
// change. A device turning stale is a change (its state and stale flag are in the key).
func changeKey(body map[string]any) ([]byte, error) {
	k := make(map[string]any, len(body))
	for n, v := range body {
		k[n] = v
	}
	delete(k, "generatedAt")
	if devs, ok := body["devices"].([]service.DeviceView); ok {
		d := make([]service.DeviceView, len(devs))
		for i, v := range devs {
			v.HeartbeatAt = ""
			d[i] = v
		}
		k["devices"] = d
	}
	if qs, ok := body["queues"].([]service.QueueView); ok {
		q := make([]service.QueueView, len(qs))
		for i, v := range qs {
			v.LatencyMs = 0
			q[i] = v
		}
		k["queues"] = q
	}
	return json.Marshal(k)
}
