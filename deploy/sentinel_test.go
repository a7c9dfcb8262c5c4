package deploy_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/daemon"
	"privateassistant/functions/service"
	"privateassistant/queue"
	"privateassistant/queue/redistest"
	"privateassistant/schema"
	"privateassistant/stacktest"
)

// TestSentinelFailoverKeepsRunsGoing: functions and agent reach the queue Redis through
// Sentinel (TLS, the shipped ACL users). Chat runs are admitted while the primary is
// killed (SIGKILL, no AOF flush); Sentinel promotes the replica, admission goes on (a
// refused admission is retried with the same requestId, as the web chat does), and
// every run admitted before, during and after completes exactly once.
func TestSentinelFailoverKeepsRunsGoing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	acl := shippedACL(t)
	primary := redistest.Start(t, redistest.Options{TLS: true, ACL: acl, AppendOnly: true})
	replica := redistest.Start(t, redistest.Options{TLS: true, ACL: acl, AppendOnly: true, ReplicaOf: primary})
	sen := redistest.StartSentinel(t, primary, "pa-queue", redistest.SentinelOptions{Password: "sentinel-password-0123456789"})
	require.Eventually(t, func() bool { n, err := sen.Replicas(ctx); return err == nil && n == 1 }, 30*time.Second, 50*time.Millisecond)

	senPass := filepath.Join(t.TempDir(), "sentinel.pass")
	require.NoError(t, os.WriteFile(senPass, []byte("sentinel-password-0123456789\n"), 0o600))
	sec := queue.RedisSecurity{TLS: true, CA: string(primary.CA), SentinelMaster: "pa-queue", SentinelAddrs: []string{sen.Addr},
		SentinelPasswordRef: "file:" + senPass}
	env := stacktest.New(t, stacktest.Options{
		Functions: func(c *service.Config) {
			c.RedisAddr, c.RedisUsername, c.RedisPassword, c.RedisSecurity = "", "pa-functions", aclPasswords["FUNCTIONS"], sec
		},
		Settings: func(s *daemon.Settings) {
			s.RedisAddr, s.RedisUsername, s.RedisPassword, s.RedisSecurity = "", "pa-agent", aclPasswords["AGENT"], sec
		},
	})
	env.StartAgent(t)
	owner, jwt := env.SignUp(t, "failover@example.com", "password-failover")
	conv := env.Conversation(t, jwt)

	// admit retries a refused admission with the same requestId until it is accepted.
	admit := func(i int) string {
		var run string
		require.Eventually(t, func() bool {
			res := env.Do(t, "POST", "/api/conversations/"+conv+"/messages", jwt, map[string]any{"requestId": fmt.Sprintf("m%d", i), "text": fmt.Sprintf("message %d", i)})
			if res.Status != 202 {
				return false
			}
			var a stacktest.Admitted
			res.JSON(t, &a)
			run = a.RunID
			return true
		}, 60*time.Second, 100*time.Millisecond, "admission %d", i)
		return run
	}
	const n = 12
	runs := make([]string, n)
	for i := 0; i < n; i++ {
		if i == n/2 {
			primary.Crash() // while the first half's runs are still being delivered and run
		}
		runs[i] = admit(i)
	}
	require.Eventually(t, func() bool { a, err := sen.Primary(ctx); return err == nil && a == replica.Addr }, 30*time.Second, 50*time.Millisecond,
		"Sentinel promoted the replica")

	for i, run := range runs {
		require.Eventually(t, func() bool {
			r, err := schema.For[schema.Run](env.Store, schema.CollRuns).Get(ctx, run)
			return err == nil && r.Status == schema.RunCompleted
		}, 90*time.Second, 100*time.Millisecond, "run %d (%s) completes after the failover", i, run)
	}
	// Exactly once: one answer per run, and the answer is the model's.
	msgs, err := schema.For[schema.Message](env.Store, schema.CollMessages).All(ctx, schema.ListQuery{Owner: owner})
	require.NoError(t, err)
	answers := map[string]int{}
	for _, m := range msgs {
		if m.OwnerID == owner && m.Role == "assistant" && m.RunID != nil {
			answers[*m.RunID]++
			require.True(t, strings.HasPrefix(*m.Text, "You said: message"), *m.Text)
		}
	}
	for i, run := range runs {
		require.Equal(t, 1, answers[run], "run %d answered exactly once", i)
	}
}
