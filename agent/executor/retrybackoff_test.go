package executor_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/executor"
	"privateassistant/agent/harness"
	"privateassistant/schema"
)

// downHarness answers every submission as unavailable.
type downHarness struct{ *fakeHarness }

func (d downHarness) Submit(context.Context, harness.Submission) (harness.Attached, error) {
	return harness.Attached{}, fmt.Errorf("%w: down for the test", harness.ErrUnavailable)
}

// A run whose harness is unavailable keeps the resume scan away for RetryBackoff's n-th
// delay after its n-th failure (the count shared through Redis), jitter included.
func TestTransientFailureBacksOff(t *testing.T) {
	s := setup(t, newFake(nil, 0))
	s.exec.Harness = func(*schema.HarnessProfile) (harness.Harness, error) { return downHarness{s.fake}, nil }
	id := s.newRun(t)
	ctx := context.Background()
	for n := int64(1); n <= 3; n++ {
		require.ErrorIs(t, s.exec.Execute(ctx, id), harness.ErrUnavailable)
		ttl, err := s.rdb.PTTL(ctx, executor.BackoffKey(id)).Result()
		require.NoError(t, err)
		hi := executor.RetryBackoff.Min << (n - 1) // 2 s, 4 s, 8 s
		require.LessOrEqual(t, ttl, hi, "failure %d", n)
		require.Greater(t, ttl, hi-hi/10-time.Second, "failure %d: at most 10%% jitter (and a second of slack)", n)
	}
}
