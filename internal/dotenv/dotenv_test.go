package dotenv

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	m, err := Parse("# comment\n\nA=1\nexport B = two words \nC=\"quoted # not a comment\"\nD='x'\nE=v # trailing\nF=\n")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"A": "1", "B": "two words", "C": "quoted # not a comment", "D": "x", "E": "v", "F": ""}, m)
	_, err = Parse("no equals sign")
	require.ErrorContains(t, err, "line 1")
	_, err = Parse("1BAD=x")
	require.Error(t, err)
}

func TestLoadDoesNotOverride(t *testing.T) {
	p := filepath.Join(t.TempDir(), ".env")
	require.NoError(t, os.WriteFile(p, []byte("DOTENV_TEST_A=file\nDOTENV_TEST_B=file\n"), 0o600))
	t.Setenv("DOTENV_TEST_A", "env")
	require.NoError(t, Load(p))
	require.Equal(t, "env", os.Getenv("DOTENV_TEST_A"))
	require.Equal(t, "file", os.Getenv("DOTENV_TEST_B"))
	os.Unsetenv("DOTENV_TEST_B")
	require.NoError(t, Load(filepath.Join(t.TempDir(), "missing")))
}

func FuzzParse(f *testing.F) {
	f.Add("A=1\n# c\nB='x'")
	f.Fuzz(func(t *testing.T, s string) {
		m, err := Parse(s)
		if err == nil {
			for k := range m {
				require.Regexp(t, keyRe, k)
			}
		}
	})
}
