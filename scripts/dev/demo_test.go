package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDemoTokensKeepSpacing: the demo model streams its answers with their spacing (the
// research answer once read "collectingsourcesIsaved…").
func TestDemoTokensKeepSpacing(t *testing.T) {
	for _, s := range []string{"Researching… collecting sources.", demoMarkdown, "a  b\n\nc \n", ""} {
		toks := tokens(s)
		require.Equal(t, s, strings.Join(toks, ""))
		for _, tok := range toks[min(1, len(toks)):] {
			require.Regexp(t, `^\s`, tok, "every token after the first starts with its whitespace")
		}
	}
	require.Greater(t, len(tokens(demoMarkdown)), 20, "streamed word by word")
}
