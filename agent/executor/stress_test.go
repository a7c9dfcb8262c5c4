package executor_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/harness"
	"privateassistant/queue"
)

// envInt reads a test knob from the environment.
func envInt(t testing.TB, name string, def int64) int64 {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		require.NoError(t, err, name)
		return n
	}
	return def
}

// TestStressHeartbeatStreamCancel runs PA_STRESS_ITERATIONS (default 1,000; 100 under the
// race detector, which makes each run about ten times slower) runs, each
// with a heartbeat every millisecond, a paced native stream and, in two of three runs, a
// cancel at a random moment, all concurrently. Every run must settle with 0 lost and 0
// duplicated events in the stream and in Appwrite (a panic anywhere fails the binary).
// The random seed is printed; PA_STRESS_SEED reruns one.
func TestStressHeartbeatStreamCancel(t *testing.T) {
	def := int64(1000)
	if raceEnabled {
		def = 100
	}
	iterations := envInt(t, "PA_STRESS_ITERATIONS", def)
	seed := envInt(t, "PA_STRESS_SEED", time.Now().UnixNano())
	t.Logf("seed %d (rerun with PA_STRESS_SEED=%d), %d iterations", seed, seed, iterations)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))

	type plan struct {
		parts  int
		cancel time.Duration // < 0: no cancel
	}
	plans := map[string]plan{}
	var mu sync.Mutex
	fake := newFake(func(key string) []harness.Event {
		mu.Lock()
		p := plans[key]
		mu.Unlock()
		parts := make([]string, p.parts)
		for i := range parts {
			parts[i] = "w" + strconv.Itoa(i) + " "
		}
		return deltas(parts...)
	}, 100*time.Microsecond)
	s := setup(t, fake)

	const workers = 4
	var wg sync.WaitGroup
	jobs := make(chan plan)
	counts := make([]map[string]int, workers)
	errs := make(chan error, iterations)
	for w := 0; w < workers; w++ {
		counts[w] = map[string]int{}
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for p := range jobs {
				typ, err := s.stressOnce(t, p.parts, p.cancel, func(id string) {
					mu.Lock()
					plans[id] = p
					mu.Unlock()
				})
				if err != nil {
					errs <- err
					continue
				}
				counts[w][typ]++
			}
		}(w)
	}
	for i := int64(0); i < iterations; i++ {
		p := plan{parts: 5 + rng.IntN(40), cancel: -1}
		if rng.IntN(3) > 0 {
			p.cancel = time.Duration(rng.IntN(4000)) * time.Microsecond
		}
		jobs <- p
	}
	close(jobs)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	total := map[string]int{}
	for _, c := range counts {
		for k, v := range c {
			total[k] += v
		}
	}
	t.Logf("settled: %v", total)
	require.Equal(t, int(iterations), total[queue.EventRunCompleted]+total[queue.EventRunCancelled])
	if iterations >= 100 {
		require.NotZero(t, total[queue.EventRunCancelled], "some cancels landed mid-stream")
		require.NotZero(t, total[queue.EventRunCompleted])
	}
}

// stressOnce admits and executes one run, cancelling it after cancel (< 0: never), and
// returns its terminal event type once the log checks out.
func (s *suite) stressOnce(t testing.TB, parts int, cancel time.Duration, prepare func(id string)) (string, error) {
	id := s.newRun(t)
	prepare(id)
	done := make(chan error, 1)
	go func() { done <- s.exec.Execute(context.Background(), id) }()
	var err error
	if cancel >= 0 {
		timer := time.NewTimer(cancel)
		select {
		case <-timer.C:
			if err := s.requestCancel(id); err != nil {
				<-done
				return "", err
			}
			err = <-done
		case err = <-done:
			timer.Stop()
		}
	} else {
		err = <-done
	}
	if err != nil {
		return "", fmt.Errorf("run %s: %w", id, err)
	}
	evs, err := s.checkLog(id)
	if err != nil {
		return "", err
	}
	return evs[len(evs)-1].Type, nil
}
