package gpu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Reading is one telemetry sample. Zero values mean "not reported".
type Reading struct {
	At          time.Time
	MemUsed     int64 // bytes
	MemTotal    int64
	BusyPercent int
	TempC       float64
	PowerW      float64
}

// Free returns total-used (0 when unknown).
func (r Reading) Free() int64 {
	if r.MemTotal == 0 {
		return 0
	}
	return r.MemTotal - r.MemUsed
}

// Stale reports whether the reading is too old to decide anything on.
func (r Reading) Stale(now time.Time, bound time.Duration) bool {
	return r.At.IsZero() || now.Sub(r.At) > bound
}

// Telemetry reads a device.
type Telemetry interface {
	Read(ctx context.Context) (Reading, error)
}

// AMDSysfs reads an amdgpu device from sysfs: Root is "/" in production and a fake tree
// in tests; Card is e.g. "card0".
type AMDSysfs struct {
	Root string
	Card string
	Now  func() time.Time
}

func readInt(p string) (int64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// Read implements Telemetry: mem_info_vram_used/total and gpu_busy_percent from the device,
// temperature (edge, milli-°C) and power (µW: power1_average, else power1_input) from hwmon.
func (a AMDSysfs) Read(context.Context) (Reading, error) {
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	dev := filepath.Join(a.Root, "sys", "class", "drm", a.Card, "device")
	r := Reading{At: now()}
	var err error
	if r.MemUsed, err = readInt(filepath.Join(dev, "mem_info_vram_used")); err != nil {
		return Reading{}, fmt.Errorf("amd %s: %w", a.Card, err)
	}
	if r.MemTotal, err = readInt(filepath.Join(dev, "mem_info_vram_total")); err != nil {
		return Reading{}, fmt.Errorf("amd %s: %w", a.Card, err)
	}
	if r.MemUsed < 0 || r.MemTotal <= 0 || r.MemUsed > r.MemTotal {
		return Reading{}, fmt.Errorf("amd %s: implausible VRAM figures used=%d total=%d", a.Card, r.MemUsed, r.MemTotal)
	}
	if v, err := readInt(filepath.Join(dev, "gpu_busy_percent")); err == nil {
		r.BusyPercent = int(v)
	}
	hw, _ := filepath.Glob(filepath.Join(dev, "hwmon", "hwmon*"))
	sort.Strings(hw)
	if len(hw) > 0 {
		if v, err := readInt(filepath.Join(hw[0], "temp1_input")); err == nil {
			r.TempC = float64(v) / 1000
		}
		if v, err := readInt(filepath.Join(hw[0], "power1_average")); err == nil {
			r.PowerW = float64(v) / 1e6
		} else if v, err := readInt(filepath.Join(hw[0], "power1_input")); err == nil {
			r.PowerW = float64(v) / 1e6
		}
	}
	return r, nil
}

// Reported is telemetry a backend reports about its device (Intel Arc: no VRAM figures in
// sysfs; llama-server's device listing says "N MiB, M MiB free").
type Reported struct {
	Report func(ctx context.Context) (total, free int64, err error)
	Now    func() time.Time
}

// Read implements Telemetry.
func (r Reported) Read(ctx context.Context) (Reading, error) {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	total, free, err := r.Report(ctx)
	if err != nil {
		return Reading{}, err
	}
	if total <= 0 || free < 0 || free > total {
		return Reading{}, errors.New("reported device memory is implausible")
	}
	return Reading{At: now(), MemTotal: total, MemUsed: total - free}, nil
}

// ParseDeviceList reads llama-server --list-devices lines like
// "  ROCm0: AMD Radeon RX 7900 XTX (24560 MiB, 24100 MiB free)".
func ParseDeviceList(out, device string) (total, free int64, err error) {
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(name) != device {
			continue
		}
		i, j := strings.LastIndex(rest, "("), strings.LastIndex(rest, ")")
		if i < 0 || j < i {
			break
		}
		var t, f int64
		if _, err := fmt.Sscanf(rest[i+1:j], "%d MiB, %d MiB free", &t, &f); err != nil {
			return 0, 0, fmt.Errorf("device %s: %q: %w", device, rest[i+1:j], err)
		}
		return t << 20, f << 20, nil
	}
	return 0, 0, fmt.Errorf("device %s not listed", device)
}

func fmtInt(v int64) string { return strconv.FormatInt(v, 10) }
