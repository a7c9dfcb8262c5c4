package provision_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/stretchr/testify/require"

	"privateassistant/schema"
	"privateassistant/schema/appwritetest"
	"privateassistant/schema/provision"
)

func cfg(ts *appwritetest.TestServer, key string, progress *bytes.Buffer) provision.Config {
	c := provision.Config{Endpoint: ts.URL, ProjectID: ts.Project, APIKey: key,
		WaitTimeout: 10 * time.Second, PollInterval: 5 * time.Millisecond}
	if progress != nil {
		c.Progress = progress
	}
	return c
}

var provisionScopes = []string{"databases.read", "databases.write", "collections.read", "collections.write", "buckets.read", "buckets.write"}

func setup(t *testing.T) (*appwritetest.TestServer, string) {
	t.Helper()
	ts := appwritetest.NewTestServer(t, appwritetest.Options{
		Keys: map[string][]string{"bootstrap-key-0123456789": provisionScopes},
	})
	return ts, "bootstrap-key-0123456789"
}

func TestFreshThenRerunChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ts, key := setup(t)
	m := schema.Definition("")
	var out bytes.Buffer

	plan, err := provision.Compare(ctx, cfg(ts, key, &out), m)
	require.NoError(t, err)
	require.Empty(t, plan.Drift)
	want := 1 + len(m.Buckets) // database + buckets
	for _, c := range m.Collections {
		want += 1 + len(c.Attributes) + len(c.Indexes)
	}
	require.Len(t, plan.Actions, want)

	_, err = provision.Apply(ctx, cfg(ts, key, &out), m)
	require.NoError(t, err)
	require.Contains(t, out.String(), "waiting for")
	require.Contains(t, out.String(), "schema is complete")

	// Everything exists exactly as declared, and is available.
	db := appwrite.NewDatabases(appwrite.NewClient(appwrite.WithEndpoint(ts.URL), appwrite.WithProject(ts.Project), appwrite.WithKey(ts.AdminKey)))
	for _, c := range m.Collections {
		got, err := db.GetCollection(m.DatabaseID, c.ID)
		require.NoError(t, err)
		require.Empty(t, got.Permissions, "no broad collection permissions")
		require.True(t, got.DocumentSecurity)
		require.Len(t, got.Attributes, len(c.Attributes))
		for _, a := range got.Attributes {
			require.Equal(t, "available", a["status"], "%s.%v", c.ID, a["key"])
		}
		for _, i := range got.Indexes {
			require.Equal(t, "available", i.Status)
		}
	}
	b, err := appwrite.NewStorage(appwrite.NewClient(appwrite.WithEndpoint(ts.URL), appwrite.WithProject(ts.Project), appwrite.WithKey(ts.AdminKey))).GetBucket(schema.BucketArtifacts)
	require.NoError(t, err)
	require.True(t, b.FileSecurity)
	require.True(t, b.Encryption)
	require.Equal(t, 20*1024*1024, b.MaximumFileSize)
	require.Empty(t, b.Permissions)

	// Re-running is a no-op.
	plan, err = provision.Compare(ctx, cfg(ts, key, &out), m)
	require.NoError(t, err)
	require.True(t, plan.Clean(), "%+v", plan)
	out.Reset()
	plan, err = provision.Apply(ctx, cfg(ts, key, &out), m)
	require.NoError(t, err)
	require.True(t, plan.Clean())
	require.NotContains(t, out.String(), "create ")
}

func TestHalfCreatedSchemaIsCompleted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ts, key := setup(t)
	m := schema.Definition("")
	// Simulate a run that died part-way: the database, one full collection and part of
	// another exist.
	partial := m
	partial.Collections = []schema.Collection{m.Collections[0], m.Collections[1]}
	partial.Collections[1].Attributes = partial.Collections[1].Attributes[:3]
	partial.Collections[1].Indexes = nil
	partial.Buckets = nil
	_, err := provision.Apply(ctx, cfg(ts, key, nil), partial)
	require.NoError(t, err)

	plan, err := provision.Compare(ctx, cfg(ts, key, nil), m)
	require.NoError(t, err)
	require.Empty(t, plan.Drift)
	require.NotEmpty(t, plan.Actions)
	for _, a := range plan.Actions {
		require.NotEqual(t, "database", a.Kind)
		require.NotEqual(t, schema.CollConversations, strings.Split(a.Target, ".")[0], "the complete collection is left alone")
	}
	_, err = provision.Apply(ctx, cfg(ts, key, nil), m)
	require.NoError(t, err)
	plan, err = provision.Compare(ctx, cfg(ts, key, nil), m)
	require.NoError(t, err)
	require.True(t, plan.Clean(), "%+v", plan)
}

func TestDriftIsRefusedAndNothingChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ts, key := setup(t)
	m := schema.Definition("")
	// Someone made runs.requestId 32 long, and opened conversations to every user.
	drifted := m
	drifted.Collections = append([]schema.Collection(nil), m.Collections...)
	for i, c := range drifted.Collections {
		switch c.ID {
		case schema.CollRuns:
			c.Attributes = append([]schema.Attribute(nil), c.Attributes...)
			for j := range c.Attributes {
				if c.Attributes[j].Key == "requestId" {
					c.Attributes[j].Size = 32
				}
			}
		case schema.CollConversations:
			c.Permissions = []string{`read("users")`}
		}
		drifted.Collections[i] = c
	}
	drifted.Collections = drifted.Collections[:4] // and never finished
	_, err := provision.Apply(ctx, cfg(ts, key, nil), drifted)
	require.NoError(t, err)

	before, err := provision.Compare(ctx, cfg(ts, key, nil), m)
	require.NoError(t, err)
	require.Len(t, before.Drift, 2, "%v", before.Drift)
	var msgs []string
	for _, d := range before.Drift {
		msgs = append(msgs, d.String())
	}
	require.Contains(t, strings.Join(msgs, "\n"), "runs.requestId: size is 32, the schema wants 64")
	require.Contains(t, strings.Join(msgs, "\n"), "conversations: permissions")

	_, err = provision.Apply(ctx, cfg(ts, key, nil), m)
	require.ErrorIs(t, err, provision.ErrDrift)
	require.NotContains(t, err.Error(), "\n", "one clear line")
	after, err := provision.Compare(ctx, cfg(ts, key, nil), m)
	require.NoError(t, err)
	require.Equal(t, before, after, "a refused apply writes nothing")
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := schema.Definition("")

	// Wrong version.
	ts, key := setup(t)
	wrong := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/health/version") {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"version":"1.9.5"}`))
			return
		}
		ts.Server.ServeHTTP(w, r)
	}))
	defer wrong.Close()
	c := cfg(ts, key, nil)
	c.Endpoint = wrong.URL + "/v1"
	_, err := provision.Apply(ctx, c, m)
	require.ErrorContains(t, err, `version "1.9.5"`)
	_, err = provision.Compare(ctx, c, m)
	require.ErrorContains(t, err, "exactly 1.9.6")

	// Missing scope.
	ts2 := appwritetest.NewTestServer(t, appwritetest.Options{Keys: map[string][]string{"docs-only-key-0123": {"documents.read"}}})
	_, err = provision.Apply(ctx, cfg(ts2, "docs-only-key-0123", nil), m)
	require.ErrorContains(t, err, "missing a scope")
	require.ErrorContains(t, err, "databases.read")

	// Unreachable endpoint.
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	c = cfg(ts, key, nil)
	c.Endpoint = dead.URL + "/v1"
	_, err = provision.Apply(ctx, c, m)
	require.ErrorContains(t, err, "cannot reach Appwrite")

	// Nothing was created by any of those.
	db := appwrite.NewDatabases(appwrite.NewClient(appwrite.WithEndpoint(ts.URL), appwrite.WithProject(ts.Project), appwrite.WithKey(ts.AdminKey)))
	_, err = db.Get(m.DatabaseID)
	require.Error(t, err)
}
