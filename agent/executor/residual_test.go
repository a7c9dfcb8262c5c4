package executor_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/appwrite/sdk-for-go/query"
	"github.com/stretchr/testify/require"

	"privateassistant/agent/executor"
	"privateassistant/agent/harness"
	"privateassistant/queue/eventlog"
	"privateassistant/schema"
)

// answerGate is an http.RoundTripper that holds the request creating one message (the
// run's answer) until the test releases it: the request has left finish's fence Check
// and not yet reached Appwrite — the residual window queue/eventlog's doc states.
type answerGate struct {
	id      string
	reached chan struct{}
	release chan struct{}
	once    sync.Once
}

func newAnswerGate(runID string) *answerGate {
	return &answerGate{id: executor.AssistantMessageID(runID), reached: make(chan struct{}), release: make(chan struct{})}
}

func (g *answerGate) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/collections/"+schema.CollMessages+"/documents") && r.Body != nil {
		body, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte(`"`+g.id+`"`)) {
			held := false
			g.once.Do(func() { held = true })
			if held {
				close(g.reached)
				<-g.release
			}
		}
	}
	return http.DefaultTransport.RoundTrip(r)
}

// gatedStore is the suite's Store over its own client whose answer create g holds.
func (s *suite) gatedStore(g *answerGate) *schema.Store {
	c := appwrite.NewClient(appwrite.WithEndpoint(s.env.TS.URL), appwrite.WithProject(s.env.TS.Project), appwrite.WithKey(s.env.RuntimeKey))
	c.Client = &http.Client{Timeout: 30 * time.Second, Transport: g}
	return schema.NewStore(c, s.env.Model)
}

// TestOlderAttemptsAnswerInTheResidualWindow proves what queue/eventlog's doc states of its
// residual window: an older attempt passes finish's fence Check, a newer attempt claims
// the run (the older one's lease lapsed: a paused process), and the older attempt's
// answer create lands after the claim. Whichever create lands first, the run has exactly
// one answer, with the deterministic id, the text of the one native run both attempts
// followed, linked from the record the newer attempt settles; the older attempt's next
// write is refused (it ends with ErrFenced) and, once the newer one has settled the run,
// nothing of the older one changes the record.
func TestOlderAttemptsAnswerInTheResidualWindow(t *testing.T) {
	for _, olderFirst := range []bool{true, false} {
		name := "the older attempt's create lands first"
		if !olderFirst {
			name = "the newer attempt's create lands first"
		}
		t.Run(name, func(t *testing.T) {
			fake := newFake(func(string) []harness.Event { return deltas("one ", "native ", "answer") }, 0)
			s := setup(t, fake)
			id := s.newRun(t)
			ctx := context.Background()
			olderGate, newerGate := newAnswerGate(id), newAnswerGate(id)

			older := s.newExecutorOn("agent-1", s.gatedStore(olderGate))
			older.HeartbeatEvery, older.LeaseTTL = time.Hour, 50*time.Millisecond // never renews
			first := make(chan error, 1)
			go func() { first <- older.Execute(ctx, id) }()
			<-olderGate.reached // past the fence Check, its create not yet at Appwrite
			require.Eventually(t, func() bool {
				n, err := s.rdb.Exists(ctx, executor.LeaseKey(id)).Result()
				return err == nil && n == 0
			}, 5*time.Second, time.Millisecond, "the older attempt's lease lapses")

			second := make(chan error, 1)
			go func() { second <- s.newExecutorOn("agent-2", s.gatedStore(newerGate)).Execute(ctx, id) }()
			<-newerGate.reached // the newer attempt claimed the run and passed its own Check

			var settled string
			if olderFirst {
				close(olderGate.release) // lands after the newer claim: the residual window
				require.ErrorIs(t, <-first, eventlog.ErrFenced, "the older attempt's next write is refused")
				close(newerGate.release) // finds the older attempt's answer and links it
				require.NoError(t, <-second)
			} else {
				close(newerGate.release)
				require.NoError(t, <-second)
				settled = s.record(t, id).UpdatedAt
				close(olderGate.release) // finds the newer attempt's answer: a no-op
				require.ErrorIs(t, <-first, eventlog.ErrFenced, "the older attempt's next write is refused")
			}

			answers, err := schema.For[schema.Message](s.store, schema.CollMessages).All(ctx, schema.ListQuery{Owner: owner,
				Filters: []string{query.Equal("runId", id)}, Limit: 100})
			require.NoError(t, err)
			require.Len(t, answers, 1, "exactly one answer")
			want := executor.AssistantMessageID(id)
			require.Equal(t, want, answers[0].ID)
			require.Equal(t, "one native answer", *answers[0].Text)
			rec := s.record(t, id)
			require.Equal(t, schema.RunCompleted, rec.Status)
			require.Equal(t, want, *rec.AssistantMessageID)
			if settled != "" {
				require.Equal(t, settled, rec.UpdatedAt, "nothing of the older attempt changed the settled record")
			}
			s.requireLog(t, id)
		})
	}
}
