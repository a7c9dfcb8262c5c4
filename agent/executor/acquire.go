package executor

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"privateassistant/queue/eventlog"
	"privateassistant/schema"
)

// grant is the result of acquiring the run's device.
type grant struct {
	release func()
	revoked <-chan struct{} // nil for plain slots
	managed bool            // the GPU manager served it (a failure is the model's, not ours)
	err     error
}

type waitNotice struct {
	pos    int
	reason string
}

// acquire takes a slot on the run's device, or a grant from the GPU manager with the
// route's model loaded. The acquisition runs in a goroutine; its waiting notices (which
// the GPU manager calls from its own goroutine) are posted here, and this loop writes
// them: the latest one wins, and none is written after the grant arrives.
func (a *attempt) acquire(ctx context.Context) grant {
	var (
		mu     sync.Mutex
		latest *waitNotice
	)
	signal := make(chan struct{}, 1)
	onWait := func(pos int, reason string) {
		mu.Lock()
		latest = &waitNotice{pos, reason}
		mu.Unlock()
		select {
		case signal <- struct{}{}:
		default:
		}
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan grant, 1)
	managed := a.e.GPU != nil && a.e.GPU.Manages(a.route.Device)
	started := a.bg.Go(func(context.Context) {
		var g grant
		g.managed = managed
		if managed {
			g.release, g.revoked, g.err = a.e.GPU.AcquireRun(actx, a.route.Device, a.runID, a.route.BackendModel, onWait)
		} else {
			g.release, g.err = a.e.Slots.Acquire(actx, a.route.Device, func(pos int) { onWait(pos, "") })
		}
		done <- g
	})
	if !started {
		return grant{err: context.Canceled}
	}
	// abandon stops waiting and gives back a grant that arrives anyway.
	abandon := func(err error) grant {
		cancel()
		if g := <-done; g.err == nil && g.release != nil {
			g.release()
		}
		return grant{err: err}
	}
	for {
		select {
		case g := <-done:
			return g
		case <-signal:
			select {
			case g := <-done: // granted meanwhile: the notice is stale
				return g
			default:
			}
			mu.Lock()
			n := *latest
			mu.Unlock()
			if n.reason == "" {
				n.reason = fmt.Sprintf("waiting for the %s GPU", a.route.Device)
			}
			err := a.setStatus(ctx, schema.RunWaitingForResource, "waiting for resource", map[string]any{"queueReason": n.reason, "queuePosition": int64(n.pos)})
			if errors.Is(err, eventlog.ErrFenced) || errors.Is(err, errSettled) {
				return abandon(err)
			}
		case <-a.hb.beat:
			if err := a.onBeat(ctx); err != nil {
				return abandon(err)
			}
		case <-a.hb.lost:
			return abandon(eventlog.ErrFenced)
		}
	}
}
