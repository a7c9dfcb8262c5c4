package appwritetest_test

import (
	"fmt"
	"testing"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/appwrite/sdk-for-go/query"
	"github.com/stretchr/testify/require"

	"privateassistant/schema/appwritetest"
)

// TestUsersList: GET /v1/users as Appwrite answers it for what the admin's member list
// uses: creation order, limit, offset, cursorAfter, the total of all; an unknown cursor
// and an unsupported query are refused.
func TestUsersList(t *testing.T) {
	t.Parallel()
	ts := appwritetest.NewTestServer(t, appwritetest.Options{})
	users := appwrite.NewUsers(keyClient(ts, ts.AdminKey))
	for i := range 5 {
		_, err := users.Create(fmt.Sprintf("u%d", i), users.WithCreateEmail(fmt.Sprintf("u%d@example.com", i)), users.WithCreatePassword("password123"))
		require.NoError(t, err)
	}
	l, err := users.List()
	require.NoError(t, err)
	require.Equal(t, 5, l.Total)
	require.Len(t, l.Users, 5)
	require.Equal(t, "u0", l.Users[0].Id)

	l, err = users.List(users.WithListQueries([]string{query.Limit(2)}))
	require.NoError(t, err)
	require.Equal(t, 5, l.Total)
	require.Equal(t, []string{"u0", "u1"}, []string{l.Users[0].Id, l.Users[1].Id})
	l, err = users.List(users.WithListQueries([]string{query.Limit(2), query.CursorAfter("u1")}))
	require.NoError(t, err)
	require.Equal(t, []string{"u2", "u3"}, []string{l.Users[0].Id, l.Users[1].Id})
	l, err = users.List(users.WithListQueries([]string{query.Limit(10), query.Offset(4)}))
	require.NoError(t, err)
	require.Len(t, l.Users, 1)
	require.Equal(t, "u4", l.Users[0].Id)

	_, err = users.List(users.WithListQueries([]string{query.CursorAfter("nobody")}))
	require.Error(t, err)
	_, err = users.List(users.WithListQueries([]string{query.Equal("email", "u1@example.com")}))
	require.Error(t, err, "stricter than Appwrite: a filter nothing uses is refused")
	_, err = users.List(users.WithListQueries([]string{query.Limit(0)}))
	require.Error(t, err)
}
