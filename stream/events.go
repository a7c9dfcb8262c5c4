package stream

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"time"

	"privateassistant/functions/httpapi"
	"privateassistant/functions/service"
	"privateassistant/longpoll"
	"privateassistant/runtimeapi"
)

func (s *Service) routes(a *httpapi.API) {
	a.Handle("GET /stream/runs/{id}/events", httpapi.Route{}, s.runEvents)
	a.Handle("GET /stream/runs/{id}", httpapi.Route{}, s.runRecord)
	a.Handle("GET /stream/feed", httpapi.Route{}, s.feed)
	a.Handle("GET /stream/v1/responses/{id}/events", httpapi.Route{RuntimeKey: true}, s.responseEvents)
	a.Handle("GET /stream/artifacts/{id}/download", httpapi.Route{}, s.download)
}

// cursor is Last-Event-ID when sent, else ?after=, validated like the long-poll's after.
func cursor(r *http.Request, dflt int64) (int64, error) {
	q := url.Values{}
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		q.Set("after", v)
	} else if v := r.URL.Query().Get("after"); v != "" {
		q.Set("after", v)
	}
	return service.ParseAfter(q, dflt)
}

var errEvents = &httpapi.Error{Status: 503, Code: "events_unavailable", Message: "live events are unavailable; retry", RetryAfter: 2 * time.Second}

// pollErr is the functions' answer to a poll's failure.
func pollErr(err error, what string) error {
	if errors.Is(err, longpoll.ErrRedis) {
		return errEvents
	}
	return service.StoreErr(err, what)
}

func (s *Service) runEvents(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
	id, err := service.PathID(r, "id")
	if err != nil {
		return err
	}
	after, err := cursor(r, 0)
	if err != nil {
		return err
	}
	ctx, done, err := s.begin(r)
	if err != nil {
		return err
	}
	defer done()
	if err := s.checkRunOwner(ctx, c.User.ID, id); err != nil {
		return err
	}
	return s.followRun(ctx, w, r, longpoll.Run{ID: id, Owner: c.User.ID}, after, "run")
}

// checkRunOwner: the functions' own read-only check (the cached "<owner> <conversation>",
// else the record; a deleted conversation's run is missing too). Foreign and missing are
// the same 404.
func (s *Service) checkRunOwner(ctx context.Context, user, run string) error {
	return service.CheckRunOwner(ctx, s.st, s.rdb, user, run)
}

// runRecord answers GET /api/runs/{id}'s body (a watching page's check on a quiet run:
// its heartbeat, phase and position), so that watching costs no function execution.
func (s *Service) runRecord(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
	id, err := service.PathID(r, "id")
	if err != nil {
		return err
	}
	ctx, done, err := s.begin(r)
	if err != nil {
		return err
	}
	defer done()
	v, err := service.RunRecord(ctx, s.st, s.rdb, c.User.ID, id)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, 200, v)
	return nil
}

func (s *Service) responseEvents(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
	after, err := cursor(r, 0)
	if err != nil {
		return err
	}
	ctx, done, err := s.begin(r)
	if err != nil {
		return err
	}
	defer done()
	id, key, err := service.VerifyRuntimeKey(ctx, s.st, r.Header.Get("Authorization"))
	if err != nil {
		return err
	}
	ext, err := service.RuntimeUser(r, key, &s.userTokens)
	if err != nil {
		return err
	}
	user, err := runtimeapi.ActingUserIDIn(ctx, s.st, id, ext)
	if err != nil {
		return service.StoreErr(err, "user")
	}
	run, err := service.OwnedResponse(ctx, s.st, s.rdb, id.Space(), user, r.PathValue("id"))
	if err != nil {
		return err
	}
	s.log.Info("runtime events followed", "component", "stream", "keyId", id.KeyID, "appId", id.AppID, "userId", user, "runId", run.ID)
	return s.followRun(ctx, w, r, longpoll.Run{ID: run.ID, Owner: user}, after, "response")
}

// followRun streams run's events after `after`: the first read before the response starts
// (so its refusals are envelopes), then live until the run ends, the client leaves or
// the service stops. An HTTP/1.1 stream takes its connection over from net/http (sse.go
// takeOver) and the handler returns: on a socket it can write without waiting it goes on
// with no goroutine while it waits (live.go), else in a goroutine of its own (what a
// waiting follower costs). Stop cancels and waits for either like a handler.
func (s *Service) followRun(ctx context.Context, w http.ResponseWriter, r *http.Request, run longpoll.Run, after int64, what string) error {
	release, err := s.follow(run.Owner)
	if err != nil {
		return err
	}
	handed := false
	defer func() {
		if !handed {
			release()
		}
	}()
	p := &longpoll.Poller{Hub: s.hub, Coalesce: s.cfg.Coalesce}
	// One follower for the whole stream: registered with the hub across batches, so an
	// event goes out as the reader hands it over (a relay, no snapshot per batch).
	f, err := p.Follow(s.st, run, after)
	if err != nil {
		return pollErr(err, what)
	}
	defer func() {
		if !handed {
			f.Close()
		}
	}()
	// The reader calls l back (busy: this handler owns f until l is handed on).
	l := &live{s: s, ctx: s.runner.Context(), f: f, what: what, release: release, busy: true}
	f.Notify(l.arrived)
	b, err := f.Next(ctx)
	if err != nil {
		return pollErr(err, what)
	}
	// Direct (live.go) when the reader may write the stream's frames itself: not with a
	// Coalesce window (it waits).
	wantDirect := direct && s.cfg.Coalesce == 0
	if end, ok := s.detach(); ok {
		dctx, cancel := context.WithCancel(s.runner.Context())
		if out, gone, ok := s.takeOver(w, r, cancel, wantDirect); ok {
			handed = true
			if gone == nil {
				cancel()
				s.goLive(l, out, b, end)
				return nil
			}
			ready := l.fallback()
			// The first batch goes out from here (decoded events are encoded again: deep
			// calls, on this goroutine's already grown stack); the stream's own goroutine
			// starts at its first wait.
			if !s.send(out, b) {
				b = longpoll.Batch{}
				go func() {
					defer end()
					defer func() { cancel(); out.close(); <-gone }()
					defer release()
					defer f.Close()
					s.stream(dctx, out, f, ready, b, what)
				}()
				return nil
			}
			f.Close()
			release()
			cancel()
			out.close()
			<-gone
			end()
			return nil
		}
		cancel()
		end()
	}
	ready := l.fallback()
	out, err := s.startSSE(w)
	if err != nil {
		return nil // the client is gone
	}
	s.stream(ctx, out, f, ready, b, what)
	return nil
}

// goLive writes a direct stream's first batch from the handler (decoded events are
// encoded again: deep calls, on this goroutine's already grown stack), then leaves the
// stream to the reader and the ticker (live.go).
func (s *Service) goLive(l *live, out *sse, b longpoll.Batch, end func()) {
	l.out, l.end = out, end
	if s.send(out, b) || !s.keep(l) {
		l.finish()
		return
	}
	l.wrote()
	l.work(onReader) // what arrived meanwhile, else idle
}

// stream writes b, then what f is handed (ready: the follower's signal), until the run
// ends, the client leaves or ctx ends.
func (s *Service) stream(ctx context.Context, out *sse, f *longpoll.Follower, ready <-chan struct{}, b longpoll.Batch, what string) {
	hb := time.NewTimer(s.cfg.Heartbeat)
	defer hb.Stop()
	var err error
	for {
		if s.send(out, b) || ctx.Err() != nil {
			return
		}
		// Wait for the reader's hand-over, with one timer for the heartbeat.
		b = longpoll.Batch{}
		for b.Len() == 0 && !b.Terminal {
			hb.Reset(s.cfg.Heartbeat)
			select {
			case <-ready:
				b, err = f.Next(ctx)
			case <-hb.C:
				// A silence: read the run once (a settled run whose end was missed), else
				// a heartbeat.
				if b, err = reread(ctx, f); err == nil && b.Len() == 0 && !b.Terminal {
					out.heartbeat()
					err = out.flush()
					if err != nil {
						return
					}
				}
			case <-ctx.Done():
				return
			}
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				out.fail(pollErr(err, what))
				return
			}
		}
	}
}

// send writes b (and "end" after a terminal batch); true when the stream is over.
func (s *Service) send(out *sse, b longpoll.Batch) (over bool) {
	if err := b.Each(func(seq int64, ev json.RawMessage) error {
		out.event(seq, "", ev)
		return out.flushFull()
	}); err != nil {
		if !errors.Is(err, errClient) {
			out.fail(err)
		}
		return true
	}
	if b.Terminal {
		out.event(-1, "end", endData(b.Status))
		_ = out.flush()
		return true
	}
	return out.flush() != nil
}

// reread runs f.Reread on a goroutine of its own, which it waits for: the Redis client's
// calls are deep, and a stream's goroutine that made one keeps the stack they grew while
// it waits, most of its life, for the next event (a goroutine's stack shrinks only by
// halves, at collections); this one's stack goes back to the runtime when it ends.
func reread(ctx context.Context, f *longpoll.Follower) (b longpoll.Batch, err error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		b, err = f.Reread(ctx)
	}()
	<-done
	return b, err
}

// adminRecheck bounds how long a feed stream shows an admin's view of the system panel
// without the caller's identity being verified again: the stream ends (without "end") and
// the client reconnects with a fresh JWT and its Last-Event-ID.
const adminRecheck = 5 * time.Minute

func (s *Service) feed(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
	after, err := cursor(r, -1)
	if err != nil {
		return err
	}
	withSystem := false
	switch r.URL.Query().Get("system") {
	case "":
	case "1":
		withSystem = true
	default:
		return httpapi.BadRequest("invalid_system", "system must be 1 when given")
	}
	ctx, done, err := s.begin(r)
	if err != nil {
		return err
	}
	defer done()
	release, err := s.follow(c.User.ID)
	if err != nil {
		return err
	}
	defer release()
	b, err := s.hub.WaitFeed(ctx, c.User.ID, after, 0)
	if err != nil {
		return pollErr(err, "feed")
	}
	var sub *sysSub
	if withSystem {
		admin := c.User.HasLabel(s.cfg.AdminLabel)
		sub = s.sys.subscribe(admin)
		defer s.sys.unsubscribe(sub)
		if admin {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, adminRecheck)
			defer cancel()
		}
	}
	out, err := s.startSSE(w)
	if err != nil {
		return nil
	}
	reset := after < 0
	for {
		if reset || b.Reset {
			data, _ := json.Marshal(map[string]int64{"next": b.Next})
			out.event(b.Next, "reset", data)
		} else {
			first := b.Next - int64(len(b.Events)) + 1
			for i, ev := range b.Events {
				out.event(first+int64(i), "", ev)
				if out.flushFull() != nil {
					return nil
				}
			}
		}
		reset = false
		if sub != nil {
			// The panel's state has no id: the client's Last-Event-ID stays the feed's.
			if body := s.sys.take(sub); body != nil {
				out.event(-1, "system", body)
			}
		}
		if err := out.flush(); err != nil || ctx.Err() != nil {
			return nil
		}
		next := b.Next
		wctx, waited := ctx, func() {}
		if sub != nil {
			wctx, waited = s.sys.waitCtx(ctx, sub)
		}
		if wctx.Err() == nil {
			b, err = s.hub.WaitFeed(wctx, c.User.ID, next, s.cfg.Heartbeat)
		}
		// A new panel state ended the wait (perhaps mid-read): no feed news this time; the
		// cursor did not move, so nothing is lost.
		woke := wctx.Err() != nil && ctx.Err() == nil
		waited()
		if ctx.Err() != nil {
			return nil
		}
		if woke {
			b, err = longpoll.FeedBatch{Events: []json.RawMessage{}, Next: next}, nil
		}
		if err != nil {
			out.fail(pollErr(err, "feed"))
			return nil
		}
		if len(b.Events) == 0 && !b.Reset && !woke {
			out.heartbeat()
		}
	}
}
