package gpu

import (
	"errors"
	"fmt"
	"time"

	"privateassistant/runconfig"
)

// QualifyConfig is a device's qualification limits in the GPU file ("qualify"). A route
// on the device goes live only after a qualification within them (pa admin gpu qualify).
type QualifyConfig struct {
	// MaxTemperatureC: the stress is cut and fails when the device reports more.
	MaxTemperatureC float64 `json:"maxTemperatureC"`
	// MinFreeMemoryMiB: VRAM that must stay free at full context.
	MinFreeMemoryMiB int64 `json:"minFreeMemoryMiB"`
	// MinPromptTokensPerSecond and MinGenerationTokensPerSecond: the slowest acceptable
	// prompt processing (filling the budget) and generation (at the route's maximum output).
	MinPromptTokensPerSecond     float64 `json:"minPromptTokensPerSecond"`
	MinGenerationTokensPerSecond float64 `json:"minGenerationTokensPerSecond"`
	// MemoryBackToleranceMiB: how far above its idle figure VRAM may stay after the stress
	// (default 64).
	MemoryBackToleranceMiB int64 `json:"memoryBackToleranceMiB"`
	// Timeout bounds one qualification once it holds the device (Go duration, default 30m).
	Timeout string `json:"timeout"`
}

// Default qualification limits, for a device whose file sets none: the XTX's 110 °C
// junction limit less a margin, 1 GiB of headroom, and speeds below which an interactive
// user gives up.
var defaultQualify = QualifyConfig{MaxTemperatureC: 95, MinFreeMemoryMiB: 1024, MinPromptTokensPerSecond: 50, MinGenerationTokensPerSecond: 5}

func (q *QualifyConfig) validate() error {
	if q == nil {
		return nil
	}
	switch {
	case q.MaxTemperatureC < 0 || q.MaxTemperatureC > 150:
		return fmt.Errorf("maxTemperatureC must be between 0 and 150 °C, not %v", q.MaxTemperatureC)
	case q.MinFreeMemoryMiB < 0 || q.MemoryBackToleranceMiB < 0:
		return errors.New("memory figures must not be negative")
	case q.MinPromptTokensPerSecond < 0 || q.MinGenerationTokensPerSecond < 0:
		return errors.New("speeds must not be negative")
	}
	if q.Timeout != "" {
		d, err := time.ParseDuration(q.Timeout)
		if err != nil {
			return err
		}
		if d <= 0 {
			return fmt.Errorf("timeout must be positive, not %s", q.Timeout)
		}
	}
	return nil
}

// QualifyLimits returns a device's qualification limits (the defaults for anything its
// file leaves unset) and how long one qualification may hold the device.
func (c *Config) QualifyLimits(device string) (runconfig.QualificationLimits, time.Duration) {
	q := defaultQualify
	for _, d := range c.Devices {
		if d.Name == device && d.Qualify != nil {
			o := *d.Qualify
			if o.MaxTemperatureC > 0 {
				q.MaxTemperatureC = o.MaxTemperatureC
			}
			if o.MinFreeMemoryMiB > 0 {
				q.MinFreeMemoryMiB = o.MinFreeMemoryMiB
			}
			if o.MinPromptTokensPerSecond > 0 {
				q.MinPromptTokensPerSecond = o.MinPromptTokensPerSecond
			}
			if o.MinGenerationTokensPerSecond > 0 {
				q.MinGenerationTokensPerSecond = o.MinGenerationTokensPerSecond
			}
			q.MemoryBackToleranceMiB, q.Timeout = o.MemoryBackToleranceMiB, o.Timeout
		}
	}
	timeout := 30 * time.Minute
	if q.Timeout != "" {
		timeout = dur(q.Timeout)
	}
	return runconfig.QualificationLimits{MaxTemperatureC: q.MaxTemperatureC, MinFreeMemoryBytes: q.MinFreeMemoryMiB << 20,
		MinPromptTPS: q.MinPromptTokensPerSecond, MinGenerationTPS: q.MinGenerationTokensPerSecond,
		MemoryBackToleranceB: q.MemoryBackToleranceMiB << 20}, timeout
}
