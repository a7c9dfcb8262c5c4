package keyref_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/keyref"
)

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "key")
	require.NoError(t, os.WriteFile(file, []byte("  sk-from-file\n"), 0o600))
	t.Setenv("PA_KEYREF_TEST_KEY", "sk-from-env")

	for _, tc := range []struct {
		ref     string
		want    string
		wantErr error
		source  keyref.Source
	}{
		{"", "", nil, keyref.None},
		{"env:PA_KEYREF_TEST_KEY", "sk-from-env", nil, keyref.Env},
		{"PA_KEYREF_TEST_KEY", "sk-from-env", nil, keyref.Env},
		{"file:" + file, "sk-from-file", nil, keyref.File},
		{"env:PA_KEYREF_SURELY_UNSET_VARIABLE", "", keyref.ErrUnset, keyref.Env},
		{"file:" + filepath.Join(dir, "missing"), "", os.ErrNotExist, keyref.File},
	} {
		got, err := keyref.Resolve(tc.ref)
		if tc.wantErr != nil {
			require.ErrorIs(t, err, tc.wantErr, tc.ref)
		} else {
			require.NoError(t, err, tc.ref)
		}
		require.Equal(t, tc.want, got, tc.ref)
		require.Equal(t, tc.source, keyref.Parse(tc.ref).Source, tc.ref)
	}
	require.Equal(t, "env:X", keyref.Parse("X").String())
}
