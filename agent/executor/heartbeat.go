package executor

import (
	"context"
	"errors"
	"time"

	"privateassistant/queue/eventlog"
	"privateassistant/schema/runstate"
)

// heartbeat is what the heartbeat goroutine tells the attempt's loop. The goroutine only
// renews the run lease and signals: a beat (dropped when the loop has not taken the last
// one yet) and, once, that another executor took the lease over. It writes nothing else;
// the loop does every write a beat calls for (onBeat).
type heartbeat struct {
	beat  chan struct{} // capacity 1
	lost  chan struct{} // closed when the lease belongs to another executor
	beats int           // beats the loop has handled (loop-owned)
}

func (a *attempt) startHeartbeat() {
	a.hb.beat, a.hb.lost = make(chan struct{}, 1), make(chan struct{})
	every := a.e.HeartbeatEvery
	a.bg.Go(func(ctx context.Context) {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			ok, err := a.lease.renew(ctx)
			if err == nil && !ok {
				close(a.hb.lost) // another executor owns the run now
				return
			}
			select {
			case a.hb.beat <- struct{}{}:
			default:
			}
		}
	})
}

// onBeat is the loop's side of a beat: the hot heartbeat (fenced) every beat; every 5th
// beat the record's heartbeat and a retry of whatever is pending (events, the patch).
func (a *attempt) onBeat(ctx context.Context) error {
	a.hb.beats++
	if err := a.log.Beat(ctx); errors.Is(err, eventlog.ErrFenced) {
		return err
	}
	if a.hb.beats%5 != 0 {
		return nil
	}
	if err := a.patch(ctx, "", runstate.Patch{HeartbeatAt: runstate.Set(now())}); err != nil {
		return err
	}
	if err := a.log.Flush(ctx); errors.Is(err, eventlog.ErrFenced) {
		return err
	}
	return nil
}
