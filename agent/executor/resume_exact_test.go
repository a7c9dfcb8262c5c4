package executor_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/harness"
	"privateassistant/hermes"
	"privateassistant/hermes/hermesreal"
	"privateassistant/hermes/hermestest"
	"privateassistant/modeltest"
	"privateassistant/queue"
	"privateassistant/schema"
)

// An attempt interrupted mid-answer (shutdown) and a second attempt that re-attaches:
// the user's text (the deltas, message.reset honoured) equals the answer, on the double
// and on real Hermes (both give a new subscriber the whole backlog).
func TestReattachPublishesEachDeltaOnce(t *testing.T) {
	for _, backend := range []string{"double", "real"} {
		t.Run(backend, func(t *testing.T) {
			model := modeltest.New("demo-model")
			var client *hermes.Client
			if backend == "real" {
				hermesreal.Require(t)
				client = hermesreal.Start(t, hermesreal.Options{Model: model}).Client()
			} else {
				ms := httptest.NewServer(model)
				t.Cleanup(ms.Close)
				d, err := hermestest.New(hermestest.Options{APIKey: doubleKey, ModelURL: ms.URL + "/v1", Model: "demo-model", DataDir: t.TempDir()})
				require.NoError(t, err)
				hs := httptest.NewServer(d)
				t.Cleanup(func() { hs.Close(); d.Close() })
				client = &hermes.Client{BaseURL: hs.URL, APIKey: doubleKey}
			}
			s := setup(t, nil)
			h := &harness.Hermes{Client: client}
			s.exec.Harness = func(*schema.HarnessProfile) (harness.Harness, error) { return h, nil }
			hs := &hermesSuite{suite: s, model: model}
			model.SetScript("#exact", modeltest.Script{Turns: []modeltest.Turn{{Tokens: strings.Fields(strings.Repeat("tok ", 60)), TokenDelay: 25 * time.Millisecond}}})
			id := hs.newRunSaying(t, "go #exact")

			ctx, cancel := context.WithCancel(context.Background())
			first := make(chan error, 1)
			go func() { first <- s.exec.Execute(ctx, id) }()
			require.Eventually(t, func() bool {
				evs, _, _ := queue.ReadEvents(context.Background(), s.rdb, id, 0, 0)
				n := 0
				for _, e := range evs {
					if e.Type == queue.EventMessageDelta {
						n++
					}
				}
				return n >= 3
			}, 90*time.Second, 5*time.Millisecond)
			cancel() // a shutdown: the native run goes on
			<-first
			require.NoError(t, s.exec.Execute(context.Background(), id))

			evs := hs.settledLog(t, id)
			require.Equal(t, queue.EventRunCompleted, evs[len(evs)-1].Type)
			var text strings.Builder
			for _, e := range evs {
				switch e.Type {
				case queue.EventMessageDelta:
					var d queue.MessageDeltaData
					require.NoError(t, json.Unmarshal(e.Data, &d))
					text.WriteString(d.Text)
				case queue.EventMessageReset:
					text.Reset()
				}
			}
			rec := s.record(t, id)
			require.NotNil(t, rec.AssistantMessageID)
			m, err := schema.For[schema.Message](s.store, schema.CollMessages).Get(context.Background(), *rec.AssistantMessageID)
			require.NoError(t, err)
			require.Equal(t, 60, strings.Count(text.String(), "tok"))
			require.Equal(t, *m.Text, text.String())
		})
	}
}
