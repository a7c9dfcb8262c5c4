package appwritetest_test

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/databases"
	"github.com/appwrite/sdk-for-go/file"
	"github.com/appwrite/sdk-for-go/functions"
	"github.com/appwrite/sdk-for-go/query"
	"github.com/appwrite/sdk-for-go/storage"
	"github.com/stretchr/testify/require"

	"privateassistant/schema/appwritetest"
)

const fnKey = "functions-key-0123456789abcdef"

func TestFunctionDeploymentsActivateAndRollBack(t *testing.T) {
	var mu sync.Mutex
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func() { mu.Lock(); clock = clock.Add(time.Second); mu.Unlock() } // past the build
	ts := appwritetest.NewTestServer(t, appwritetest.Options{Now: now, ProcessingDelay: 500 * time.Millisecond,
		Keys: map[string][]string{fnKey: {"functions.read", "functions.write"}}})
	fn := functions.New(keyClient(ts, fnKey))
	_, err := fn.Create("runs", "runs", "go-1.26", fn.WithCreateEntrypoint("main.go"))
	require.NoError(t, err)
	_, err = fn.Create("runs", "runs", "go-1.26")
	require.Equal(t, "function_already_exists", typeOf(t, err))

	code := filepath.Join(t.TempDir(), "code.tar.gz")
	require.NoError(t, os.WriteFile(code, []byte("not really gzip"), 0o600))
	d1, err := fn.CreateDeployment("runs", file.NewInputFile(code, "code.tar.gz"), true)
	require.NoError(t, err)
	require.Equal(t, "waiting", d1.Status)
	require.Equal(t, "runs", d1.ResourceId)
	// Activating a deployment that is still building is refused.
	_, err = fn.UpdateFunctionDeployment("runs", d1.Id)
	require.Equal(t, "build_not_ready", typeOf(t, err))
	f, err := fn.Get("runs")
	require.NoError(t, err)
	require.Empty(t, f.DeploymentId, "nothing is active before the build is ready")
	advance()
	f, err = fn.Get("runs")
	require.NoError(t, err)
	require.Equal(t, d1.Id, f.DeploymentId, "activate=true makes the ready deployment active")

	d2, err := fn.CreateDeployment("runs", file.NewInputFile(code, "code.tar.gz"), true)
	require.NoError(t, err)
	advance()
	f, err = fn.Get("runs")
	require.NoError(t, err)
	require.Equal(t, d2.Id, f.DeploymentId)
	require.Equal(t, d2.Id, f.LatestDeploymentId)

	// Roll back: the previous deployment becomes active again.
	f, err = fn.UpdateFunctionDeployment("runs", d1.Id)
	require.NoError(t, err)
	require.Equal(t, d1.Id, f.DeploymentId)
	require.Equal(t, d2.Id, f.LatestDeploymentId)

	list, err := fn.ListDeployments("runs", fn.WithListDeploymentsQueries([]string{query.OrderDesc("$createdAt"), query.Limit(1)}))
	require.NoError(t, err)
	require.Equal(t, 2, list.Total)
	require.Len(t, list.Deployments, 1)
	require.Equal(t, d2.Id, list.Deployments[0].Id)
	got, err := fn.GetDeployment("runs", d1.Id)
	require.NoError(t, err)
	require.Equal(t, "ready", got.Status)

	_, err = fn.UpdateFunctionDeployment("runs", "nope")
	require.Equal(t, "deployment_not_found", typeOf(t, err))
	_, err = fn.Get("nope")
	require.Equal(t, "function_not_found", typeOf(t, err))
	// The ordinary admin key holds no functions scope.
	_, err = functions.New(keyClient(ts, ts.AdminKey)).Get("runs")
	require.Equal(t, "general_unauthorized_scope", typeOf(t, err))
}

func TestListFilesPagesByCursor(t *testing.T) {
	ts := appwritetest.NewTestServer(t, appwritetest.Options{})
	st := storage.New(keyClient(ts, ts.AdminKey))
	_, err := st.CreateBucket("b", "b", st.WithCreateBucketFileSecurity(true))
	require.NoError(t, err)
	dir := t.TempDir()
	want := []string{}
	for i := range 7 {
		p := filepath.Join(dir, "f.txt")
		require.NoError(t, os.WriteFile(p, []byte{byte(i)}, 0o600))
		id := "file" + string(rune('a'+i))
		_, err := st.CreateFile("b", id, file.NewInputFile(p, "f.txt"), st.WithCreateFilePermissions([]string{`read("user:u1")`}))
		require.NoError(t, err)
		want = append(want, id)
	}
	got, cursor := []string{}, ""
	for {
		qs := []string{query.Limit(3)}
		if cursor != "" {
			qs = append(qs, query.CursorAfter(cursor))
		}
		page, err := st.ListFiles("b", st.WithListFilesQueries(qs))
		require.NoError(t, err)
		require.Equal(t, 7, page.Total)
		for _, f := range page.Files {
			got = append(got, f.Id)
			require.Equal(t, []string{`read("user:u1")`}, f.Permissions)
		}
		if len(page.Files) < 3 {
			break
		}
		cursor = page.Files[len(page.Files)-1].Id
	}
	require.ElementsMatch(t, want, got)
	require.Len(t, got, 7, "no file twice")
	_, err = st.ListFiles("b", st.WithListFilesQueries([]string{query.CursorAfter("gone")}))
	require.Equal(t, "general_cursor_not_found", typeOf(t, err))
}

func TestAKeyMayPreserveDocumentDates(t *testing.T) {
	ts := appwritetest.NewTestServer(t, appwritetest.Options{})
	db := databases.New(keyClient(ts, ts.AdminKey))
	_, err := db.Create("d", "d")
	require.NoError(t, err)
	_, err = db.CreateCollection("d", "c", "c")
	require.NoError(t, err)
	_, err = db.CreateStringAttribute("d", "c", "s", 10, false)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		a, err := db.GetAttribute("d", "c", "s")
		return err == nil && a != nil && attrStatus(a) == "available"
	}, 5*time.Second, 10*time.Millisecond)
	const created, updated = "2024-01-02T03:04:05.678+00:00", "2024-02-03T04:05:06.789+00:00"
	doc, err := db.CreateDocument("d", "c", "x", map[string]any{"s": "v", "$createdAt": created, "$updatedAt": updated})
	require.NoError(t, err)
	require.Equal(t, created, doc.CreatedAt)
	require.Equal(t, updated, doc.UpdatedAt)
	_, err = db.CreateDocument("d", "c", "y", map[string]any{"s": "v", "$createdAt": "yesterday"})
	require.Equal(t, "document_invalid_structure", typeOf(t, err))
}

func typeOf(t *testing.T, err error) string {
	t.Helper()
	_, ty := errType(t, err)
	return ty
}

func attrStatus(a *any) string {
	m, _ := (*a).(map[string]any)
	s, _ := m["status"].(string)
	return s
}
