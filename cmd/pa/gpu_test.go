package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAdminGPUConfirm: pa admin gpu confirm DEVICE posts the admin API's confirmation;
// anything but "confirm", or a bad device id, is a usage error that sends nothing.
func TestAdminGPUConfirm(t *testing.T) {
	f := newFakeAPI(t)
	r := pa(t, f, "admin", "gpu", "confirm", "xtx")
	require.Equal(t, 0, r.code, r.stderr)
	got := f.requests()
	require.Len(t, got, 1)
	require.Equal(t, "POST", got[0].Method)
	require.Equal(t, "/api/gpus/xtx/confirm", got[0].URI)

	for _, args := range [][]string{{"admin", "gpu", "reset", "xtx"}, {"admin", "gpu", "confirm", ".."}, {"admin", "gpu", "confirm"}} {
		r := pa(t, f, args...)
		require.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
	}
	require.Len(t, f.requests(), 1, "a usage error sends nothing")
}
