package service_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionstest"
	"privateassistant/schema"
)

// BenchmarkSearchTenThousandMessages: GET /api/conversations/search over one user's 10,000
// messages in 100 conversations (a word in 1 % of them), beside the floor of the
// title-only search the web did before (GET /api/conversations: the first page, whose
// titles it filters). Both go through the function and the Appwrite emulator on loopback,
// the emulator on the engine PA_APPWRITE_ENGINE names; the emulator scans for a search
// where MariaDB and MongoDB use the fulltext index, so on them the search costs less than
// here. Reported: ms per search, ms per title list, and their ratio.
func BenchmarkSearchTenThousandMessages(b *testing.B) {
	ctx := context.Background()
	env := functionstest.New(b)
	owner, jwt := env.SignUp(b, "bench-search@example.com", "password-bench")
	convs := make([]string, 100) // written directly: the API limits new conversations per minute
	for i := range convs {
		convs[i] = fmt.Sprintf("c%031d", i)
		_, err := schema.For[schema.Conversation](env.Store, schema.CollConversations).Create(ctx, convs[i], owner, &schema.Conversation{
			OwnerID: owner, Title: fmt.Sprintf("Trip %d", i), LastActivityAt: time.Now().UTC().Format(time.RFC3339Nano)})
		require.NoError(b, err)
	}
	msgs := schema.For[schema.Message](env.Store, schema.CollMessages)
	words := []string{"river", "train", "budget", "museum", "dinner", "ticket", "weather", "hotel", "coffee", "market"}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	sem := make(chan struct{}, 16)
	for i := 0; i < 10000; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			text := fmt.Sprintf("message %d about the %s and the %s, nothing else", i, words[i%10], words[(i/10)%10])
			if i%100 == 7 {
				text += " with zanzibar in it"
			}
			role := "user"
			if i%2 == 1 {
				role = "assistant"
			}
			conv := convs[i%100]
			_, err := msgs.Create(ctx, fmt.Sprintf("m%031d", i), owner, &schema.Message{OwnerID: owner, ConversationID: conv,
				Sequence: int64(i/100 + 1), Role: role, Text: &text})
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	require.NoError(b, <-errs)

	// The floor first, so the search can report itself beside it.
	var floorMs float64
	b.Run("titles", func(b *testing.B) {
		t0 := time.Now()
		for i := 0; i < b.N; i++ {
			r := env.Do(b, "GET", "/api/conversations?limit=25", jwt, nil)
			require.Equal(b, 200, r.Status, string(r.Body))
		}
		floorMs = float64(time.Since(t0).Microseconds()) / 1000 / float64(b.N)
	})
	b.Run("messages", func(b *testing.B) {
		t0 := time.Now()
		for i := 0; i < b.N; i++ {
			r := env.Do(b, "GET", "/api/conversations/search?q=zanzibar&limit=25", jwt, nil)
			require.Equal(b, 200, r.Status, string(r.Body))
		}
		ms := float64(time.Since(t0).Microseconds()) / 1000 / float64(b.N)
		b.ReportMetric(ms, "search-ms")
		b.ReportMetric(floorMs, "title-list-ms")
		if floorMs > 0 {
			b.ReportMetric(ms/floorMs, "ratio-to-title-list")
		}
	})
}
