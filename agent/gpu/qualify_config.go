package gpu

import (
	"errors"
	"fmt"
	"time"

	"privateassistant/runconfig"
)

// QualifyConfig is a device's qualification limits in the GPU file ("qualify"). A route
// on the device goes live only after a qualification within them (pa admin gpu qualify).
// A limit left out takes its default; 0 turns it off (e.g. minFreeMemoryMiB 0 for a
// device that reports no memory figures).
type QualifyConfig struct {
	// MaxTemperatureC: the stress is cut and fails when the device reports more.
	MaxTemperatureC *float64 `json:"maxTemperatureC"`
	// MinFreeMemoryMiB: VRAM that must stay free at full context.
	MinFreeMemoryMiB *int64 `json:"minFreeMemoryMiB"`
	// MinPromptTokensPerSecond and MinGenerationTokensPerSecond: the slowest acceptable
	// prompt processing (filling the budget) and generation (at the route's maximum output).
	MinPromptTokensPerSecond     *float64 `json:"minPromptTokensPerSecond"`
	MinGenerationTokensPerSecond *float64 `json:"minGenerationTokensPerSecond"`
	// MemoryBackToleranceMiB: how far above its idle figure VRAM may stay after the stress
	// (default 64).
	MemoryBackToleranceMiB int64 `json:"memoryBackToleranceMiB"`
	// Timeout bounds one qualification once it holds the device (Go duration, default 30m).
	Timeout string `json:"timeout"`
}

// Default qualification limits: the XTX's 110 °C junction limit less a margin, 1 GiB of
// headroom, and speeds below which an interactive user gives up.
const (
	defaultMaxTemperatureC  = 95
	defaultMinFreeMemoryMiB = 1024
	defaultMinPromptTPS     = 50
	defaultMinGenerationTPS = 5
)

func (q *QualifyConfig) validate() error {
	if q == nil {
		return nil
	}
	neg := func(p *float64) bool { return p != nil && *p < 0 }
	switch {
	case q.MaxTemperatureC != nil && (*q.MaxTemperatureC < 0 || *q.MaxTemperatureC > 150):
		return fmt.Errorf("maxTemperatureC must be between 0 and 150 °C, not %v", *q.MaxTemperatureC)
	case (q.MinFreeMemoryMiB != nil && *q.MinFreeMemoryMiB < 0) || q.MemoryBackToleranceMiB < 0:
		return errors.New("memory figures must not be negative")
	case neg(q.MinPromptTokensPerSecond) || neg(q.MinGenerationTokensPerSecond):
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
	lim := runconfig.QualificationLimits{MaxTemperatureC: defaultMaxTemperatureC, MinFreeMemoryBytes: defaultMinFreeMemoryMiB << 20,
		MinPromptTPS: defaultMinPromptTPS, MinGenerationTPS: defaultMinGenerationTPS}
	timeout := 30 * time.Minute
	for _, d := range c.Devices {
		if d.Name != device || d.Qualify == nil {
			continue
		}
		o := d.Qualify
		if o.MaxTemperatureC != nil {
			lim.MaxTemperatureC = *o.MaxTemperatureC
		}
		if o.MinFreeMemoryMiB != nil {
			lim.MinFreeMemoryBytes = *o.MinFreeMemoryMiB << 20
		}
		if o.MinPromptTokensPerSecond != nil {
			lim.MinPromptTPS = *o.MinPromptTokensPerSecond
		}
		if o.MinGenerationTokensPerSecond != nil {
			lim.MinGenerationTPS = *o.MinGenerationTokensPerSecond
		}
		lim.MemoryBackToleranceB = o.MemoryBackToleranceMiB << 20
		if o.Timeout != "" {
			timeout = dur(o.Timeout)
		}
	}
	return lim, timeout
}
