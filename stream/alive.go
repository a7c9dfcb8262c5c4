package stream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"time"

	"privateassistant/internal/startstop"
	"privateassistant/queue"
)

// The service beats in Redis (queue.StreamAliveKey, every queue.AliveEvery) while it runs
// and removes its beat when it stops: the agent's /readyz and the admin's /api/system read
// it to say whether a stream service is up (neither can reach this process directly).

// instanceID names this process in the heartbeat set: host, pid and a random suffix.
func instanceID() string {
	h, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return h + ":" + strconv.Itoa(os.Getpid()) + ":" + hex.EncodeToString(b[:])
}

// beat is the heartbeat loop (started by Start on the service's runner).
func (s *Service) beat(ctx context.Context) {
	every := s.cfg.AliveEvery
	if every <= 0 {
		every = queue.AliveEvery
	}
	startstop.Every(ctx, every, s.log, "stream service heartbeat", func(ctx context.Context) error {
		return queue.Beat(ctx, s.rdb, queue.StreamAliveKey(), s.instance, time.Now())
	})
}

// unbeat removes this instance's heartbeat (Stop, before the client closes).
func (s *Service) unbeat() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.rdb.ZRem(ctx, queue.StreamAliveKey(), s.instance).Err()
}
