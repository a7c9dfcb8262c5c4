package gpu

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FakeAMD writes a fake sysfs tree for an amdgpu card.
func writeFakeAMD(t *testing.T, root string, used, total int64) {
	t.Helper()
	dev := filepath.Join(root, "sys", "class", "drm", "card1", "device")
	hw := filepath.Join(dev, "hwmon", "hwmon3")
	require.NoError(t, os.MkdirAll(hw, 0o755))
	for name, v := range map[string]string{
		filepath.Join(dev, "mem_info_vram_used"): itoa(used), filepath.Join(dev, "mem_info_vram_total"): itoa(total),
		filepath.Join(dev, "gpu_busy_percent"): "37", filepath.Join(hw, "temp1_input"): "61000",
		filepath.Join(hw, "power1_input"): "212000000",
	} {
		require.NoError(t, os.WriteFile(name, []byte(v+"\n"), 0o644))
	}
}

func itoa(v int64) string { return fmtInt(v) }

func TestAMDSysfsParsing(t *testing.T) {
	root := t.TempDir()
	writeFakeAMD(t, root, 4<<30, 24<<30)
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	r, err := AMDSysfs{Root: root, Card: "card1", Now: func() time.Time { return at }}.Read(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(4<<30), r.MemUsed)
	require.Equal(t, int64(20<<30), r.Free())
	require.Equal(t, 37, r.BusyPercent)
	require.Equal(t, 61.0, r.TempC)
	require.Equal(t, 212.0, r.PowerW, "power1_input when power1_average is absent")
	require.False(t, r.Stale(at.Add(2*time.Second), 5*time.Second))
	require.True(t, r.Stale(at.Add(6*time.Second), 5*time.Second), "readings go stale")
	require.True(t, Reading{}.Stale(at, time.Hour), "no reading is stale")

	_, err = AMDSysfs{Root: root, Card: "card9"}.Read(context.Background())
	require.Error(t, err)
	writeFakeAMD(t, root, 30<<30, 24<<30)
	_, err = AMDSysfs{Root: root, Card: "card1"}.Read(context.Background())
	require.ErrorContains(t, err, "implausible")
}

func TestDeviceListParsing(t *testing.T) {
	out := "Available devices:\n  ROCm0: AMD Radeon RX 7900 XTX (24560 MiB, 24100 MiB free)\n  SYCL0: Intel(R) Arc(TM) A770 Graphics (16225 MiB, 15000 MiB free)\n"
	total, free, err := ParseDeviceList(out, "SYCL0")
	require.NoError(t, err)
	require.Equal(t, int64(16225)<<20, total)
	require.Equal(t, int64(15000)<<20, free)
	_, _, err = ParseDeviceList(out, "Vulkan1")
	require.Error(t, err)
	r, err := Reported{Report: func(context.Context) (int64, int64, error) { return ParseDeviceList(out, "ROCm0") }}.Read(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(460)<<20, r.MemUsed)
}
