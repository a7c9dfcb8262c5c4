package immich

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/immich/immichtest"
	"privateassistant/queue/redistest"
)

func TestPauseWaitsForActiveJobsThenResumes(t *testing.T) {
	for _, legacyAPI := range []bool{false, true} {
		name := "queues-api"
		if legacyAPI {
			name = "legacy-jobs-api"
		}
		t.Run(name, func(t *testing.T) {
			im := immichtest.Start(t, "admin-key", legacyAPI)
			rdb := redistest.Start(t).Client()
			c := &Client{URL: im.URL, APIKey: "admin-key", RDB: rdb, Agent: "heavy-host", PollEvery: 10 * time.Millisecond}
			im.SetActive("smartSearch", 2)
			done := make(chan error, 1)
			go func() { done <- c.Pause(context.Background()) }()
			require.Eventually(t, func() bool { return im.Paused("smartSearch") && im.Paused("ocr") && im.Paused("faceDetection") }, 5*time.Second, 5*time.Millisecond)
			select {
			case err := <-done:
				t.Fatalf("Pause returned while a job was active: %v", err)
			case <-time.After(100 * time.Millisecond):
			}
			im.SetActive("smartSearch", 0)
			require.NoError(t, <-done)
			require.False(t, im.Paused("thumbnailGeneration"), "only the ML queues are paused")
			n, err := rdb.SCard(context.Background(), c.recordKey()).Result()
			require.NoError(t, err)
			require.EqualValues(t, 3, n, "the pause is recorded for crash recovery")

			require.NoError(t, c.Resume(context.Background()))
			require.False(t, im.Paused("smartSearch"))
			require.False(t, im.Paused("ocr"))
			n, _ = rdb.SCard(context.Background(), c.recordKey()).Result()
			require.Zero(t, n)
		})
	}
}

func TestRecoverAfterCrash(t *testing.T) {
	im := immichtest.Start(t, "admin-key", false)
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	crashed := &Client{URL: im.URL, APIKey: "admin-key", RDB: rdb, Agent: "heavy-host", PollEvery: 10 * time.Millisecond}
	require.NoError(t, crashed.Pause(ctx))
	// The agent dies here. Its successor resumes what it paused, and nothing else.
	other := &Client{URL: im.URL, APIKey: "admin-key", RDB: rdb, Agent: "chat-host"}
	got, err := other.Recover(ctx)
	require.NoError(t, err)
	require.Empty(t, got, "another agent's record is not ours")
	require.True(t, im.Paused("smartSearch"))
	next := &Client{URL: im.URL, APIKey: "admin-key", RDB: rdb, Agent: "heavy-host"}
	got, err = next.Recover(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, DefaultQueues, got)
	for _, q := range DefaultQueues {
		require.False(t, im.Paused(q), q)
	}
	got, err = next.Recover(ctx)
	require.NoError(t, err)
	require.Empty(t, got, "recovery is idempotent")
}

func TestUnreachableOrRefusedIsNotRisked(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	im := immichtest.Start(t, "admin-key", false)
	down := im.URL
	im.Close()
	c := &Client{URL: down, APIKey: "admin-key", RDB: rdb, Agent: "a"}
	err := c.Pause(ctx)
	require.ErrorIs(t, err, ErrUnreachable)
	require.NotContains(t, err.Error(), "admin-key", "the key never appears in errors")
	c.AllowUnreachable = true
	require.NoError(t, c.Pause(ctx), "configured to take the device anyway")

	im2 := immichtest.Start(t, "admin-key", false)
	bad := &Client{URL: im2.URL, APIKey: "wrong", RDB: rdb, Agent: "b"}
	require.ErrorContains(t, bad.Pause(ctx), "401")

	im2.SetActive("ocr", 1)
	slow := &Client{URL: im2.URL, APIKey: "admin-key", RDB: rdb, Agent: "c", ActiveTimeout: 100 * time.Millisecond, PollEvery: 10 * time.Millisecond}
	require.ErrorContains(t, slow.Pause(ctx), "ocr has 1 active job")
	require.False(t, im2.Paused("ocr"), "a failed pause resumes what it paused")
}
