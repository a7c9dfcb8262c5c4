package admit

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/schema"
)

// What a run record keeps of the caller's labels: sorted, once each, bounded in count and
// size (a longer label could not be stored, nor named by a role); none is nil.
func TestOwnerLabelsAreBounded(t *testing.T) {
	require.Nil(t, OwnerLabels(nil))
	require.Nil(t, OwnerLabels([]string{""}))
	require.Equal(t, []string{"coder", "member"}, OwnerLabels([]string{"member", "coder", "member", strings.Repeat("x", schema.SizeLabel+1)}))
	var many []string
	for i := 0; i < 2*schema.MaxOwnerLabels; i++ {
		many = append(many, fmt.Sprintf("l%03d", i))
	}
	got := OwnerLabels(many)
	require.Len(t, got, schema.MaxOwnerLabels)
	require.Equal(t, "l000", got[0])
}
