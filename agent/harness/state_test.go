package harness_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/harness"
)

// TestNativeStates (issue 31 item 4): every native run state, its event kind and whether it
// ends the run — the one mapping the executor reconciles by.
func TestNativeStates(t *testing.T) {
	for st, want := range map[harness.State]struct {
		kind     harness.EventKind
		terminal bool
	}{
		harness.StateQueued:             {"queued", false},
		harness.StateRunning:            {"running", false},
		harness.StateWaitingForApproval: {"waiting_for_approval", false},
		harness.StateStopping:           {"stopping", false},
		harness.StateCompleted:          {harness.KindCompleted, true},
		harness.StateFailed:             {harness.KindFailed, true},
		harness.StateCancelled:          {harness.KindCancelled, true},
		harness.StateInterrupted:        {harness.KindInterrupted, true},
		"something-new":                 {"something-new", false}, // an unknown word never ends a run
	} {
		require.Equal(t, want.kind, st.Kind(), st)
		require.Equal(t, want.terminal, st.Terminal(), st)
	}
}
