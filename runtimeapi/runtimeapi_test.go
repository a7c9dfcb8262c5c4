package runtimeapi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/stretchr/testify/require"

	"privateassistant/queue/redistest"
	"privateassistant/runtimeapi"
	"privateassistant/schema"
	"privateassistant/schema/schematest"
)

func TestSecretsParseAndHash(t *testing.T) {
	id, secret, err := runtimeapi.NewSecret()
	require.NoError(t, err)
	require.True(t, runtimeapi.ValidKeyID(id), id)
	got, ok := runtimeapi.ParseSecret(secret)
	require.True(t, ok, secret)
	require.Equal(t, id, got)
	_, other, err := runtimeapi.NewSecret()
	require.NoError(t, err)
	require.NotEqual(t, secret, other)
	require.Len(t, runtimeapi.HashSecret(secret), 64)
	require.NotEqual(t, runtimeapi.HashSecret(secret), runtimeapi.HashSecret(other))
	for _, bad := range []string{"", "pak_", secret + "x", secret[:len(secret)-1], strings.Replace(secret, "pak_", "sk_", 1), strings.ToUpper(secret)} {
		_, ok := runtimeapi.ParseSecret(bad)
		require.False(t, ok, bad)
	}
}

func TestDerivedIDsFitAndSeparateApps(t *testing.T) {
	a := runtimeapi.AppUserID("appa", "alice")
	require.Len(t, a, 36) // Appwrite's user id limit
	require.Equal(t, a, runtimeapi.AppUserID("appa", "alice"), "stable")
	require.NotEqual(t, a, runtimeapi.AppUserID("appb", "alice"), "another app's user of the same name is another user")
	require.NotEqual(t, runtimeapi.AppUserID("app", "aalice"), runtimeapi.AppUserID("appa", "alice"), "no ambiguity at the boundary")
	rid := runtimeapi.RequestID("abcdefghijklmnopqrstuvwx", strings.Repeat("k", 256))
	require.LessOrEqual(t, len(rid), schema.SizeRequestID)
	require.True(t, strings.HasPrefix(rid, runtimeapi.RequestIDPrefix("abcdefghijklmnopqrstuvwx")))
	require.True(t, runtimeapi.ValidAppID("homeapp1"))
	for _, bad := range []string{"", "1app", "Home", "home-app", strings.Repeat("a", 25)} {
		require.False(t, runtimeapi.ValidAppID(bad), bad)
	}
	require.False(t, runtimeapi.ValidExternalID(""))
	require.False(t, runtimeapi.ValidExternalID("a\nb"))
	require.False(t, runtimeapi.ValidExternalID(strings.Repeat("x", 129)))
	require.True(t, runtimeapi.ValidExternalID("auth0|1234 ü"))
}

func TestLimitIsAFixedWindowPerKey(t *testing.T) {
	r := redistest.Start(t)
	rdb := r.Client()
	defer rdb.Close()
	ctx := context.Background()
	k := &schema.RuntimeKey{Meta: schema.Meta{ID: "rk0000000000000001"}, RateLimit: 2, RateWindowMs: 60_000}
	now := time.UnixMilli(60_000 * 1000)
	for i := 0; i < 2; i++ {
		wait, err := runtimeapi.Limit(ctx, rdb, k, now)
		require.NoError(t, err)
		require.Zero(t, wait)
	}
	wait, err := runtimeapi.Limit(ctx, rdb, k, now)
	require.NoError(t, err)
	require.Greater(t, wait, time.Duration(0))
	other := &schema.RuntimeKey{Meta: schema.Meta{ID: "rk0000000000000002"}, RateLimit: 2, RateWindowMs: 60_000}
	wait, err = runtimeapi.Limit(ctx, rdb, other, now)
	require.NoError(t, err)
	require.Zero(t, wait, "another key has its own budget")
	wait, err = runtimeapi.Limit(ctx, rdb, k, now.Add(time.Minute))
	require.NoError(t, err)
	require.Zero(t, wait, "the next window starts afresh")
}

func TestVerifyAndResolve(t *testing.T) {
	env := schematest.New(t)
	r := redistest.Start(t)
	rdb := r.Client()
	defer rdb.Close()
	ctx := context.Background()
	cl := appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL), appwrite.WithProject(env.TS.Project), appwrite.WithKey(env.TS.AdminKey))
	st := schema.NewStore(cl, env.Model)

	id, secret, err := runtimeapi.NewSecret()
	require.NoError(t, err)
	keys := schema.For[schema.RuntimeKey](st, schema.CollRuntimeKeys)
	_, err = keys.Create(ctx, id, "", &schema.RuntimeKey{AppID: "appa", Name: "a", SecretHash: runtimeapi.HashSecret(secret),
		Roles: []string{"chat"}, RateLimit: 5, RateWindowMs: 60_000, CreatedBy: "admin"})
	require.NoError(t, err)

	got, rec, err := runtimeapi.Verify(ctx, st, "Bearer "+secret)
	require.NoError(t, err)
	require.Equal(t, runtimeapi.Identity{KeyID: id, AppID: "appa", Roles: []string{"chat"}}, got)
	require.Equal(t, id, rec.ID)
	require.True(t, got.AllowsRole("chat"))
	require.False(t, got.AllowsRole("research"))
	_, forged, _ := runtimeapi.NewSecret()
	forged = "pak_" + id + forged[len("pak_")+len(id):] // the right id, another secret
	for _, bad := range []string{"", secret, "Bearer ", "Bearer " + forged} {
		_, _, err := runtimeapi.Verify(ctx, st, bad)
		require.ErrorIs(t, err, runtimeapi.ErrInvalidKey, bad)
	}
	_, err = keys.Update(ctx, id, map[string]any{"revokedAt": time.Now().UTC().Format(time.RFC3339Nano)})
	require.NoError(t, err)
	_, _, err = runtimeapi.Verify(ctx, st, "Bearer "+secret)
	require.ErrorIs(t, err, runtimeapi.ErrRevoked)

	// The app's user is made on first use with the app's label, then found again.
	users := runtimeapi.NewUsers(st, rdb)
	u, err := users.Resolve(ctx, "appa", "alice")
	require.NoError(t, err)
	require.Equal(t, runtimeapi.User{ID: runtimeapi.AppUserID("appa", "alice"), Labels: []string{"appappa"}}, u)
	again, err := users.Resolve(ctx, "appa", "alice")
	require.NoError(t, err)
	require.Equal(t, u, again)

	// A derived id that exists without the app's label is refused, never adopted.
	squat := runtimeapi.AppUserID("appa", "mallory")
	_, err = appwrite.NewUsers(cl).Create(squat)
	require.NoError(t, err)
	_, err = users.Resolve(ctx, "appa", "mallory")
	require.ErrorIs(t, err, runtimeapi.ErrNotAppUser)

	// A link makes the app's user an existing member.
	memberID, _ := env.SignUp(t, "member@example.com", "password-member")
	_, err = schema.For[schema.RuntimeLink](st, schema.CollRuntimeLinks).Create(ctx, runtimeapi.LinkID("appa", "bob"), "",
		&schema.RuntimeLink{AppID: "appa", ExternalID: "bob", UserID: memberID, CreatedBy: "admin"})
	require.NoError(t, err)
	linked, err := users.Resolve(ctx, "appa", "bob")
	require.NoError(t, err)
	require.Equal(t, memberID, linked.ID)
	require.True(t, linked.Linked)
	other, err := users.Resolve(ctx, "appb", "bob")
	require.NoError(t, err)
	require.NotEqual(t, memberID, other.ID, "the link is the app's only")
}
