package executor_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/harness"
	"privateassistant/runconfig"
	"privateassistant/schema"
)

// The harness gets the tool policy pinned in the run's bindings (the gateway and the
// direct harness enforce it); a run without one gets a policy that allows nothing.
func TestSubmissionCarriesThePinnedToolPolicy(t *testing.T) {
	fake := newFake(func(string) []harness.Event { return deltas("ok") }, 0)
	s := setup(t, fake)
	ctx := context.Background()
	withPolicy := s.newRun(t)
	_, err := schema.For[schema.RunBinding](s.store, schema.CollRunBindings).Update(ctx, withPolicy, map[string]any{"toolPolicy": `["file","web_search"]`})
	require.NoError(t, err)
	without := s.newRun(t)
	require.NoError(t, s.exec.Execute(ctx, withPolicy))
	require.NoError(t, s.exec.Execute(ctx, without))
	fake.mu.Lock()
	defer fake.mu.Unlock()
	require.Len(t, fake.subs, 2)
	require.Equal(t, withPolicy, fake.subs[0].Key)
	require.Equal(t, runconfig.ToolPolicy{"file", "web_search"}, fake.subs[0].Tools)
	require.True(t, fake.subs[0].Tools.Allows("write_file"))
	require.False(t, fake.subs[1].Tools.Allows("write_file"), "no pinned policy allows nothing")
	require.Empty(t, fake.subs[1].Tools)
}
