package gpu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"privateassistant/agent/immich"
	"privateassistant/queue"
)

// Config is the agent's GPU host file (PA_GPU_CONFIG; deploy/gpu.example.json): the
// devices this agent manages, how each serves models, reads its telemetry and shares
// with Immich. Credentials are named by environment variable, never written here.
type Config struct {
	Devices []DeviceConfig `json:"devices"`
}

// DeviceConfig is one managed device.
type DeviceConfig struct {
	Name  string `json:"name"`
	Slots int    `json:"slots"`
	// DrainTimeout, when set (Go duration), revokes grants still running that long after
	// a swap became due. Unset (the default): a swap waits for running work to finish.
	DrainTimeout string `json:"drainTimeout"`
	MemoryWait   string `json:"memoryWait"` // default 5s
	// MaxExtraWait bounds the swap-minimizing order: jobs for the loaded model go ahead of
	// an older job for another model only while that one has waited less than this.
	// Default 10m; "0s" is strict FIFO.
	MaxExtraWait string `json:"maxExtraWait"`
	// IdleUnload: a model nothing used for this long is unloaded, so Immich resumes
	// (default for the device's models; a model's own idleUnload wins). Unset: kept loaded.
	IdleUnload string `json:"idleUnload"`
	// RecoverReadings: consecutive fresh telemetry readings with the memory back after
	// which an unknown device recovers by itself (default 3).
	RecoverReadings int             `json:"recoverReadings"`
	Backend         BackendConfig   `json:"backend"`
	Telemetry       *TelemetryConf  `json:"telemetry"`
	Immich          *ImmichConfig   `json:"immich"`
	Models          map[string]Spec `json:"models"`
	// Qualify holds the limits a route's qualification on this device must meet
	// (qualify_config.go); unset: the defaults.
	Qualify *QualifyConfig `json:"qualify"`
}

// Spec is a model the device can serve.
type Spec struct {
	File      string `json:"file"`      // process backends: the GGUF path
	Footprint int64  `json:"footprint"` // predicted device memory, bytes
	Context   int64  `json:"context"`   // context to start the server with (and the route budget it must meet)
	// IdleUnload (Go duration) overrides the device's idleUnload for this model.
	IdleUnload string `json:"idleUnload"`
	// Preemptible: a run holding this model is asked to yield (Grant.Yield) when a swap
	// to another model is due, instead of being waited for.
	Preemptible bool `json:"preemptible"`
}

// BackendConfig picks the backend kind.
type BackendConfig struct {
	Kind      string   `json:"kind"`      // process | router | ollama | upstream
	Command   []string `json:"command"`   // process: argv with {model} {file} {port} {context}
	URL       string   `json:"url"`       // router | ollama | upstream
	APIKeyEnv string   `json:"apiKeyEnv"` // upstream credential (env var name)
}

// TelemetryConf picks the telemetry source.
type TelemetryConf struct {
	Kind string `json:"kind"` // amd-sysfs | device-report
	Card string `json:"card"` // amd-sysfs: card0, card1…
	Root string `json:"root"` // amd-sysfs: default "/"
	// device-report (Intel Arc: no VRAM figures in sysfs): a command printing llama.cpp's
	// device list ("SYCL0: Intel(R) Arc(TM) A770 Graphics (16225 MiB, 15000 MiB free)"),
	// e.g. ["llama-server", "--list-devices"], and the device to read from it.
	Command []string `json:"command"`
	Device  string   `json:"device"`
}

// ImmichConfig shares the device with Immich's ML.
type ImmichConfig struct {
	URL              string   `json:"url"`
	APIKeyEnv        string   `json:"apiKeyEnv"`
	Queues           []string `json:"queues"`
	AllowUnreachable bool     `json:"allowUnreachable"`
}

// LoadConfig reads and checks a config file.
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c Config
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	seen := map[string]bool{}
	for i, d := range c.Devices {
		where := fmt.Sprintf("%s: devices[%d]", path, i)
		switch {
		case d.Name == "":
			return nil, fmt.Errorf("%s: name is required", where)
		case seen[d.Name]:
			return nil, fmt.Errorf("%s: device %q appears twice", where, d.Name)
		case d.Backend.Kind == "process" && len(d.Backend.Command) == 0:
			return nil, fmt.Errorf("%s: a process backend needs a command", where)
		case (d.Backend.Kind == "ollama" || d.Backend.Kind == "upstream" || d.Backend.Kind == "router") && d.Backend.URL == "":
			return nil, fmt.Errorf("%s: a %s backend needs a url", where, d.Backend.Kind)
		case d.Backend.Kind != "process" && d.Backend.Kind != "router" && d.Backend.Kind != "ollama" && d.Backend.Kind != "upstream":
			return nil, fmt.Errorf("%s: backend kind must be process, router, ollama or upstream, not %q", where, d.Backend.Kind)
		case d.Telemetry != nil && d.Telemetry.Kind != "amd-sysfs" && d.Telemetry.Kind != "device-report":
			return nil, fmt.Errorf("%s: telemetry kind must be amd-sysfs or device-report", where)
		case d.Telemetry != nil && d.Telemetry.Kind == "device-report" && (len(d.Telemetry.Command) == 0 || d.Telemetry.Device == ""):
			return nil, fmt.Errorf("%s: device-report telemetry needs command and device", where)
		case d.Immich != nil && (d.Immich.URL == "" || d.Immich.APIKeyEnv == ""):
			return nil, fmt.Errorf("%s: immich needs url and apiKeyEnv", where)
		}
		if err := d.Qualify.validate(); err != nil {
			return nil, fmt.Errorf("%s: qualify: %w", where, err)
		}
		fields := []string{d.DrainTimeout, d.MemoryWait, d.MaxExtraWait, d.IdleUnload}
		for _, sp := range d.Models {
			fields = append(fields, sp.IdleUnload)
		}
		for _, f := range fields {
			if f != "" {
				if _, err := time.ParseDuration(f); err != nil {
					return nil, fmt.Errorf("%s: %w", where, err)
				}
			}
		}
		seen[d.Name] = true
	}
	return &c, nil
}

// ConfirmKey holds the time (RFC 3339) of the latest operator confirmation that device is
// free; the admin API sets it with a short TTL, and the device's manager applies it once
// if the device became unknown before it.
func ConfirmKey(device string) string { return queue.GPUKey(device) + ":confirm" }

func dur(s string) time.Duration {
	d, _ := time.ParseDuration(s)
	return d
}

func env(name string) (string, error) {
	if name == "" {
		return "", nil
	}
	v := os.Getenv(name)
	if v == "" {
		return "", fmt.Errorf("environment variable %s is not set", name)
	}
	return v, nil
}

// Build makes the devices' managers (not started). Each takes the device's control
// lease through rdb as owner. Options adjust every device before its manager is made
// (the daemon sets how grant holders are checked).
func (c *Config) Build(rdb redis.UniversalClient, owner string, leaseTTL time.Duration, opts ...func(*Device)) (Pool, map[string]*ControlLease, map[string]*immich.Client, error) {
	pool, leases, tenants := Pool{}, map[string]*ControlLease{}, map[string]*immich.Client{}
	for _, d := range c.Devices {
		foot := map[string]int64{}
		for m, s := range d.Models {
			foot[m] = s.Footprint
		}
		var be Backend
		switch d.Backend.Kind {
		case "process":
			key, err := env(d.Backend.APIKeyEnv)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("device %s: %w", d.Name, err)
			}
			models, argv := d.Models, d.Backend.Command
			be = &ProcessBackend{Footprints: foot, APIKey: key, Command: func(model string, port int) []string {
				s := models[model]
				out := make([]string, len(argv))
				for i, a := range argv {
					a = strings.ReplaceAll(a, "{model}", model)
					a = strings.ReplaceAll(a, "{file}", s.File)
					a = strings.ReplaceAll(a, "{port}", strconv.Itoa(port))
					a = strings.ReplaceAll(a, "{context}", strconv.FormatInt(s.Context, 10))
					out[i] = a
				}
				return out
			}}
		case "router":
			key, err := env(d.Backend.APIKeyEnv)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("device %s: %w", d.Name, err)
			}
			be = &RouterBackend{URL: d.Backend.URL, APIKey: key, Footprints: foot}
		case "ollama":
			models := d.Models
			be = &OllamaBackend{URL: d.Backend.URL, Footprints: foot, NumCtx: func(m string) int64 { return models[m].Context }}
		case "upstream":
			key, err := env(d.Backend.APIKeyEnv)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("device %s: %w", d.Name, err)
			}
			be = &UpstreamBackend{URL: d.Backend.URL, APIKey: key}
		}
		models := d.Models
		extra := 10 * time.Minute
		if d.MaxExtraWait != "" {
			extra = dur(d.MaxExtraWait)
		}
		idle := dur(d.IdleUnload)
		dev := Device{Name: d.Name, Backend: be, Slots: d.Slots, DrainTimeout: dur(d.DrainTimeout), MemoryWait: dur(d.MemoryWait),
			MaxExtraWait: extra, RecoverReadings: d.RecoverReadings,
			Budget:      func(m string) int64 { return models[m].Context },
			Preemptible: func(m string) bool { return models[m].Preemptible },
			IdleUnload: func(m string) time.Duration {
				if s, ok := models[m]; ok && s.IdleUnload != "" {
					return dur(s.IdleUnload)
				}
				return idle
			}}
		if t := d.Telemetry; t != nil && t.Kind == "device-report" {
			argv, name := t.Command, t.Device
			dev.Telemetry = Reported{Report: func(ctx context.Context) (int64, int64, error) {
				ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
				if err != nil {
					return 0, 0, fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
				}
				return ParseDeviceList(string(out), name)
			}}
		} else if t != nil {
			root := t.Root
			if root == "" {
				root = "/"
			}
			dev.Telemetry = AMDSysfs{Root: root, Card: t.Card}
		}
		if im := d.Immich; im != nil {
			key, err := env(im.APIKeyEnv)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("device %s immich: %w", d.Name, err)
			}
			// The pause record is keyed by host and device (stable across restarts), so the
			// next start of this agent resumes what a crashed one paused.
			host, _ := os.Hostname()
			cl := &immich.Client{URL: im.URL, APIKey: key, Queues: im.Queues, RDB: rdb, Agent: host + ":" + d.Name, AllowUnreachable: im.AllowUnreachable}
			dev.Immich, tenants[d.Name] = cl, cl
		}
		if rdb != nil {
			name := d.Name
			// What a grant-holding run is doing (its status in the run's Redis state), for
			// the reasons other users' waiting runs show.
			dev.HolderStatus = func(ctx context.Context, run string) (string, error) {
				st, err := rdb.HGet(ctx, queue.StateKey(run), "status").Result()
				if errors.Is(err, redis.Nil) {
					return "", nil
				}
				return st, err
			}
			// An operator's confirmation that an unknown device is free (the admin API
			// writes it: POST /api/admin/gpu/{device}/confirm, or pa admin gpu confirm).
			dev.ConfirmRequested = func(ctx context.Context) (time.Time, error) {
				v, err := rdb.Get(ctx, ConfirmKey(name)).Result()
				if errors.Is(err, redis.Nil) {
					return time.Time{}, nil
				}
				if err != nil {
					return time.Time{}, err
				}
				return time.Parse(time.RFC3339Nano, v)
			}
		}
		l := &ControlLease{RDB: rdb, Device: d.Name, Owner: owner, TTL: leaseTTL}
		dev.Lease, leases[d.Name] = l, l
		for _, o := range opts {
			o(&dev)
		}
		pool[d.Name] = NewManager(dev)
	}
	return pool, leases, tenants, nil
}
