package schema_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/appwrite/sdk-for-go/query"
	"github.com/stretchr/testify/require"

	"privateassistant/schema"
	"privateassistant/schema/appwritetest"
	"privateassistant/schema/schematest"
)

func now() string { return time.Now().UTC().Format(time.RFC3339Nano) }

func TestModelIsValid(t *testing.T) {
	t.Parallel()
	m := schema.Definition("")
	require.NoError(t, m.Validate())
	ids := map[string]bool{}
	for _, c := range m.Collections {
		ids[c.ID] = true
		require.Empty(t, c.Permissions, "%s: no collection-level grants", c.ID)
		require.True(t, c.DocumentSecurity, c.ID)
	}
	for _, id := range []string{schema.CollConversations, schema.CollMessages, schema.CollRuns, schema.CollEvents,
		schema.CollArtifacts, schema.CollContextSnapshots, schema.CollHarnessProfiles, schema.CollModelRoutes,
		schema.CollSettings, schema.CollGPUStatus, schema.CollRunBindings, schema.CollAudit} {
		require.True(t, ids[id], "missing collection %s", id)
	}
	// The unique indexes docs/design/data.md lists.
	unique := map[string]string{}
	for _, c := range m.Collections {
		for _, i := range c.Indexes {
			if i.Type == schema.IndexUnique {
				unique[c.ID] = strings.Join(i.Attributes, "+")
			}
		}
	}
	// (runId, sequence) of events and (id, revision) of harness profiles and model routes
	// are unique by their document ids (EventDocID, runconfig.RevisionDocID), not by an index.
	require.Equal(t, map[string]string{
		schema.CollMessages: "sequenceKey", schema.CollRuns: "ownerId+requestId",
		schema.CollArtifacts: "bucketId+fileId",
		schema.CollSettings:  "ownerId", schema.CollGPUStatus: "device", schema.CollRunBindings: "runId",
	}, unique)
	// Every unique index is over string attributes only: MongoDB enforces no other (issue 12).
	for _, c := range m.Collections {
		for _, i := range c.Indexes {
			if i.Type != schema.IndexUnique {
				continue
			}
			for _, k := range i.Attributes {
				a := c.Attr(k)
				require.NotNil(t, a, "%s.%s: %s", c.ID, i.Key, k)
				require.Equal(t, schema.TypeString, a.Type, "%s.%s: %s is not a string", c.ID, i.Key, k)
			}
		}
	}
	// No index covers a payload field, but for the one fulltext index: what was said
	// (messages.text, search over it: issue 34).
	for _, c := range m.Collections {
		for _, i := range c.Indexes {
			if i.Type == schema.IndexFulltext {
				require.Equal(t, schema.CollMessages+".text", c.ID+"."+strings.Join(i.Attributes, ","), "the only fulltext index")
				continue
			}
			for _, a := range i.Attributes {
				require.NotContains(t, []string{"text", "data", "context", "capabilities", "roles", "detail", "usage"}, a, "%s.%s", c.ID, i.Key)
			}
		}
	}

	bad := m
	bad.Collections = append([]schema.Collection{{ID: "x", Permissions: []string{`read("any")`}}}, m.Collections...)
	require.ErrorContains(t, bad.Validate(), "broad permission")
}

func TestCreateSetsExactPermissions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := schematest.New(t)
	convs := schema.For[schema.Conversation](env.Store, schema.CollConversations)
	c, err := convs.Create(ctx, "c1", "user1", &schema.Conversation{OwnerID: "user1", Title: "hi", LastActivityAt: now()})
	require.NoError(t, err)
	require.Equal(t, []string{`read("user:user1")`}, c.Permissions)
	require.Equal(t, "c1", c.ID)

	_, err = convs.Create(ctx, "c2", "", &schema.Conversation{OwnerID: "user1", Title: "hi", LastActivityAt: now()})
	require.ErrorContains(t, err, "needs an owner")

	bind := schema.For[schema.RunBinding](env.Store, schema.CollRunBindings)
	b, err := bind.Create(ctx, "r1", "user1", &schema.RunBinding{OwnerID: "user1", RunID: "r1", ConversationID: "c1", MessageID: "m1",
		ContextSnapshotID: "s1", HarnessProfileID: "h", HarnessRevision: 1, RouteID: "chat", RouteRevision: 1, Queue: "chat"})
	require.NoError(t, err)
	require.Empty(t, b.Permissions, "server-only records carry no permissions")
}

func TestOwnerIsolation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := schematest.New(t)
	u1, jwt1 := env.SignUp(t, "one@example.com", "password-one-1")
	u2, _ := env.SignUp(t, "two@example.com", "password-two-2")
	convs := schema.For[schema.Conversation](env.Store, schema.CollConversations)
	for i := 0; i < 3; i++ {
		_, err := convs.Create(ctx, fmt.Sprintf("a%d", i), u1, &schema.Conversation{OwnerID: u1, Title: "mine", LastActivityAt: now()})
		require.NoError(t, err)
	}
	_, err := convs.Create(ctx, "b0", u2, &schema.Conversation{OwnerID: u2, Title: "theirs", LastActivityAt: now()})
	require.NoError(t, err)

	// A foreign id is indistinguishable from a missing one.
	_, errForeign := convs.GetOwned(ctx, u1, "b0")
	_, errMissing := convs.GetOwned(ctx, u1, "nope")
	require.ErrorIs(t, errForeign, schema.ErrNotFound)
	require.ErrorIs(t, errMissing, schema.ErrNotFound)
	require.Equal(t, strings.Replace(errForeign.Error(), "b0", "X", 1), strings.Replace(errMissing.Error(), "nope", "X", 1))
	_, err = convs.UpdateOwned(ctx, u1, "b0", map[string]any{"title": "stolen"})
	require.ErrorIs(t, err, schema.ErrNotFound)
	got, err := convs.Get(ctx, "b0")
	require.NoError(t, err)
	require.Equal(t, "theirs", got.Title)

	mine, err := convs.All(ctx, schema.ListQuery{Owner: u1})
	require.NoError(t, err)
	require.Len(t, mine, 3)
	for _, c := range mine {
		require.Equal(t, u1, c.OwnerID)
	}
	_, err = convs.List(ctx, schema.ListQuery{})
	require.ErrorContains(t, err, "per owner")

	// The permission really is read-only for the owner, enforced by Appwrite itself.
	asUser := appwrite.NewDatabases(appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL), appwrite.WithProject(env.TS.Project), appwrite.WithJWT(jwt1)))
	l, err := asUser.ListDocuments(env.Model.DatabaseID, schema.CollConversations)
	require.NoError(t, err)
	require.Equal(t, 3, l.Total)
	_, err = asUser.UpdateDocument(env.Model.DatabaseID, schema.CollConversations, "a0", asUser.WithUpdateDocumentData(map[string]any{"title": "x"}))
	require.Error(t, err)
	_, err = asUser.GetDocument(env.Model.DatabaseID, schema.CollConversations, "b0")
	require.Error(t, err)
}

func TestPaginationNeverAssumesOnePage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := schematest.New(t)
	events := schema.For[schema.Event](env.Store, schema.CollEvents)
	for i := 1; i <= 120; i++ {
		_, err := events.Create(ctx, fmt.Sprintf("e%03d", i), "u", &schema.Event{OwnerID: "u", RunID: "r1", Sequence: int64(i), Type: "message.delta"})
		require.NoError(t, err)
	}
	p, err := events.List(ctx, schema.ListQuery{Owner: "u", Limit: 50, Order: []string{query.OrderAsc("sequence")}})
	require.NoError(t, err)
	require.Len(t, p.Items, 50)
	require.Equal(t, "e050", p.Next)
	all, err := events.All(ctx, schema.ListQuery{Owner: "u", Filters: []string{query.Equal("runId", "r1")}, Limit: 50, Order: []string{query.OrderAsc("sequence")}})
	require.NoError(t, err)
	require.Len(t, all, 120)
	for i, e := range all {
		require.Equal(t, int64(i+1), e.Sequence)
	}
}

func TestTypedErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := schematest.New(t)
	msgs := schema.For[schema.Message](env.Store, schema.CollMessages)
	m := &schema.Message{OwnerID: "u", ConversationID: "c", Sequence: 1, Role: "user", Text: schema.Ptr("hi")}
	_, err := msgs.Create(ctx, "m1", "u", m)
	require.NoError(t, err)
	_, err = msgs.Create(ctx, "m2", "u", m) // same conversation + sequence
	require.ErrorIs(t, err, schema.ErrConflict)
	_, err = msgs.Create(ctx, "m1", "u", &schema.Message{OwnerID: "u", ConversationID: "c", Sequence: 2, Role: "user"})
	require.ErrorIs(t, err, schema.ErrConflict)

	// Declared sizes and enums are enforced before sending, naming the field.
	// (Message text is not a hard limit: it overflows to a file, overflow_test.go.)
	_, err = msgs.Create(ctx, "m3", "u", &schema.Message{OwnerID: "u", ConversationID: "c", Sequence: 3, Role: "user", RequestID: schema.Ptr(strings.Repeat("x", schema.SizeRequestID+1))})
	require.ErrorIs(t, err, schema.ErrInvalid)
	require.ErrorContains(t, err, "messages.requestId")
	_, err = msgs.Create(ctx, "m3", "u", &schema.Message{OwnerID: "u", ConversationID: "c", Sequence: 3, Role: "robot"})
	require.ErrorContains(t, err, "messages.role")
	_, err = msgs.Update(ctx, "m1", map[string]any{"bogus": 1})
	require.ErrorIs(t, err, schema.ErrInvalid)

	// Unauthorized: a key without document scopes.
	bad := schema.NewStore(appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL), appwrite.WithProject(env.TS.Project), appwrite.WithKey("no-such-key")), env.Model)
	_, err = schema.For[schema.Message](bad, schema.CollMessages).Get(ctx, "m1")
	require.ErrorIs(t, err, schema.ErrUnauthorized)

	// Unavailable: nothing listening.
	dead := schema.NewStore(appwrite.NewClient(appwrite.WithEndpoint("http://127.0.0.1:1/v1"), appwrite.WithProject("p"), appwrite.WithKey("k")), env.Model)
	_, err = schema.For[schema.Message](dead, schema.CollMessages).Get(ctx, "m1")
	require.ErrorIs(t, err, schema.ErrUnavailable)

	// A cancelled context stops before calling.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = msgs.Get(cctx, "m1")
	require.ErrorIs(t, err, context.Canceled)
}

func TestAttributeNotAvailableIsTyped(t *testing.T) {
	t.Parallel()
	ts := appwritetest.NewTestServer(t, appwritetest.Options{ProcessingDelay: time.Hour})
	c := appwrite.NewClient(appwrite.WithEndpoint(ts.URL), appwrite.WithProject(ts.Project), appwrite.WithKey(ts.AdminKey))
	db := appwrite.NewDatabases(c)
	_, err := db.Create("d", "D")
	require.NoError(t, err)
	_, err = db.CreateCollection("d", schema.CollAudit, "Audit")
	require.NoError(t, err)
	_, err = db.CreateStringAttribute("d", schema.CollAudit, "actorId", 36, true)
	require.NoError(t, err)
	m := schema.Model{DatabaseID: "d", Collections: []schema.Collection{{ID: schema.CollAudit,
		Attributes: []schema.Attribute{{Key: "actorId", Type: schema.TypeString, Size: 36, Required: true}}}}}
	type actor struct {
		schema.Meta
		ActorID string `json:"actorId"`
	}
	audit := schema.For[actor](schema.NewStore(c, m), schema.CollAudit)
	_, err = audit.Create(context.Background(), "a1", "", &actor{ActorID: "u"})
	require.ErrorIs(t, err, schema.ErrNotAvailable)
	require.NotErrorIs(t, err, schema.ErrInvalid)
}

// Revision commits: a stale one is refused, and of concurrent commits against one revision
// exactly one wins — on every engine, every write in the same millisecond (where the
// X-Appwrite-Timestamp check alone lets several land).
func TestUpdateRevisionGuard(t *testing.T) {
	t.Parallel()
	for _, e := range appwritetest.Engines {
		t.Run(string(e), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			env := schematest.OneMillisecond(t, e)
			settings := schema.For[schema.Settings](env.Store, schema.CollSettings)
			_, err := settings.Create(ctx, "system", "", &schema.Settings{OwnerID: "system", Revision: 1})
			require.NoError(t, err)

			s2, err := settings.UpdateRevision(ctx, "system", 1, map[string]any{"roles": `{"chat":{}}`})
			require.NoError(t, err)
			require.Equal(t, int64(2), s2.Revision)
			_, err = settings.UpdateRevision(ctx, "system", 1, map[string]any{"roles": `{}`})
			require.ErrorIs(t, err, schema.ErrStale)

			// Concurrent commits against one revision: exactly one wins.
			var wg sync.WaitGroup
			wins := make(chan int, 8)
			for i := 0; i < 8; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					if _, err := settings.UpdateRevision(ctx, "system", 2, map[string]any{"roles": fmt.Sprintf(`{"n":%d}`, i)}); err == nil {
						wins <- i
					} else {
						require.ErrorIs(t, err, schema.ErrStale)
					}
				}(i)
			}
			wg.Wait()
			close(wins)
			require.Len(t, wins, 1)
			winsCopy := wins
			final, err := settings.Get(ctx, "system")
			require.NoError(t, err)
			require.Equal(t, int64(3), final.Revision)
			require.Equal(t, fmt.Sprintf(`{"n":%d}`, <-winsCopy), *final.Roles, "the winner's patch is the record")
		})
	}
	env := schematest.New(t)
	_, err := schema.For[schema.Conversation](env.Store, schema.CollConversations).UpdateRevision(context.Background(), "x", 1, nil)
	require.ErrorContains(t, err, "not revision guarded")
}
