package gateway

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/runconfig"
)

// TestProbeRunsAreServedOnlyWhileBound: a release probe's run id is pinned to its route
// with no tool while it runs; once unbound it falls through to the bindings (none: an
// unknown run, refused), and other runs are never affected.
func TestProbeRunsAreServedOnlyWhileBound(t *testing.T) {
	ctx := context.Background()
	var p ProbeRuns
	pinned := p.Pinned(func(context.Context, string) (Route, error) { return Route{}, ErrUnknownRun })
	tools := p.Tools(func(context.Context, string) (runconfig.ToolPolicy, error) {
		return runconfig.ToolPolicy{}, ErrUnknownRun
	})
	unbind := p.Bind("probe-abc-chat", Route{Alias: "chat", Revision: 2, Device: "arc", Model: "m"})
	r, err := pinned(ctx, "probe-abc-chat")
	require.NoError(t, err)
	require.Equal(t, Route{Alias: "chat", Revision: 2, Device: "arc", Model: "m"}, r)
	pol, err := tools(ctx, "probe-abc-chat")
	require.NoError(t, err)
	require.Equal(t, runconfig.ToolPolicy{}, pol, "a probe may call no tool")
	_, err = pinned(ctx, "probe-abc-coding")
	require.ErrorIs(t, err, ErrUnknownRun)
	unbind()
	_, err = pinned(ctx, "probe-abc-chat")
	require.ErrorIs(t, err, ErrUnknownRun)
	_, err = tools(ctx, "probe-abc-chat")
	require.ErrorIs(t, err, ErrUnknownRun)
}
