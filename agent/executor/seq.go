package executor

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"privateassistant/queue"
	"privateassistant/queue/eventlog"
)

// The native stream position a run's attempts have published through.
//
// Hermes gives every new subscriber of a run the whole retained backlog (up to 1000
// events), so an attempt that re-attaches to a native run (after an agent restart, a lost
// lease, a retry) would publish the earlier attempt's deltas and tool events a second
// time. Each attempt therefore records, in Redis next to the run's event log, the native
// seq of the last native event whose effects are all in the log (a delta still being
// coalesced does not count), and a new attempt opens the stream after it
// (Last-Event-ID). The write is fenced like the log's own writes: only the holder of the
// run's attempt fence (queue/eventlog) may move it, so an older attempt cannot move it
// after a newer claim. A flushed text delta carries the position in its own append
// (eventlog.Mark: the same fenced script, one round trip, the position never lands
// without the event); other events are followed by saveSeq's own fenced write, and
// saveSeq writes nothing while events still wait for their Redis append. The value
// names the native run it belongs to: a resubmission that started a new native run (the
// direct harness lives in the agent's memory) starts from the beginning, after a
// message.reset.

// NativeSeqKey is the Redis key holding "<native run id> <seq>" for a run.
func NativeSeqKey(runID string) string { return queue.NativeSeqKey(runID) }

// nativeSeqTTL bounds how long a run's position outlives its last write (a run's other
// keys are expired by the outbox once it settles; this one expires on its own).
const nativeSeqTTL = 7 * 24 * time.Hour

var setSeqScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return 1`)

// loadSeq returns the position published for the native run id (-1: from the start).
func (a *attempt) loadSeq(ctx context.Context, nativeID string) int64 {
	v, err := a.e.RDB.Get(ctx, NativeSeqKey(a.runID)).Result()
	if err != nil {
		return -1
	}
	id, n, ok := strings.Cut(v, " ")
	if !ok || id != nativeID {
		return -1
	}
	seq, err := strconv.ParseInt(n, 10, 64)
	if err != nil || seq < 0 {
		return -1
	}
	return seq
}

// seqMark is the position write that goes with an event completing the native events
// through seq (nil: nothing to record). The event log writes it in the append's own
// fenced script (eventlog.Mark), so a flushed delta costs one round trip, not two, and
// the position lands exactly when the event does.
func (a *attempt) seqMark(seq int64) *eventlog.Mark {
	if seq <= a.savedSeq || a.nativeID == "" {
		return nil
	}
	return &eventlog.Mark{Key: NativeSeqKey(a.runID), Value: a.nativeID + " " + strconv.FormatInt(seq, 10), TTL: nativeSeqTTL}
}

// saveSeq records that every native event up to a.seenSeq is in the log. A failure is
// logged and retried with the next event: at worst a later attempt publishes a few
// events twice. Nothing is recorded while events wait for their Redis append: the
// position would run ahead of them (their own marks record it when they land).
func (a *attempt) saveSeq(ctx context.Context) error {
	if a.seenSeq <= a.savedSeq || a.deltas.Len() > 0 || a.nativeID == "" {
		return nil
	}
	if n, _ := a.log.Pending(); n > 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	r, err := setSeqScript.Run(cctx, a.e.RDB, []string{eventlog.AttemptKey(a.runID), NativeSeqKey(a.runID)},
		a.token, a.nativeID+" "+strconv.FormatInt(a.seenSeq, 10), nativeSeqTTL.Milliseconds()).Int64()
	switch {
	case err != nil:
		a.e.log().Warn("native stream position not saved", "run", a.runID, "err", err)
		return nil
	case r < 0:
		return eventlog.ErrFenced
	}
	a.savedSeq = a.seenSeq
	return nil
}
