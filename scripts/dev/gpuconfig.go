package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"privateassistant/agent/immich/immichtest"
)

// Immich queues the dev xtx pauses around its model loads (as deploy/gpu.example.json).
var devImmichQueues = []string{"smartSearch", "faceDetection", "ocr"}

// The xtx's two work models (deploy/gpu.example.json's): research runs on the first
// (route "work"), coding on the second (route "code"), so a coding job after a research
// job swaps the xtx.
const (
	devResearchModel = "qwen3-30b-a3b-q4"
	devCodingModel   = "qwen3-14b-q5"
)

// gpuConfig writes the dev stack's GPU host file (PA_GPU_CONFIG) and what it names, and
// returns its path. Production in miniature (deploy/gpu.example.json): the arc serves
// chat (4 slots, its own), the xtx serves the work roles (1 slot) and is shared with
// Immich — here the Immich double on the origin (/_dev/immich), paused before the xtx
// loads a model and resumed once the model is idle-unloaded — with AMD telemetry read
// from a fake sysfs tree under the data directory; the arc's device report is a file too,
// so a route qualification (PA_ROUTE_QUALIFICATION: the gate on role switches to a route
// on a managed device) can measure both devices and pass. The arc's backend is the stack's
// model as an upstream (the scripted demo model on the origin, or MODEL_URL); the xtx's is
// a process backend whose model servers are child processes answering with that model
// (modelchild.go), one per loaded model, so the xtx swaps between the research and the
// coding model. The agent's GPU managers lease, load, unload and fence every request,
// and the gateway is the only way the harnesses reach a model. Credentials go by environment variable, as the
// config format wants; the names carry the data directory's hash so two stacks in one
// process (tests) never share them.
func (s *Stack) gpuConfig(cfg Config, k *keys, mux *http.ServeMux, modelURL string) (string, error) {
	suffix := strings.ToUpper(secretFrom(cfg.DataDir, "dev-env"))
	modelKeyEnv := ""
	if s.Model != nil {
		modelKeyEnv = "PA_DEV_MODEL_KEY_" + suffix
		if err := os.Setenv(modelKeyEnv, s.Model.APIKey); err != nil {
			return "", err
		}
	}
	immichKeyEnv := "PA_DEV_IMMICH_KEY_" + suffix
	s.Immich = immichtest.New("immich-"+secretFrom(k.JWTSecret, "dev-immich"), false)
	if err := os.Setenv(immichKeyEnv, s.Immich.Key); err != nil {
		return "", err
	}
	mux.Handle("/_dev/immich/", http.StripPrefix("/_dev/immich", s.Immich))

	// The xtx's sysfs: 24 GiB of VRAM, 1 GiB used, 45 °C, 30 W.
	sysfs := filepath.Join(cfg.DataDir, "sysfs")
	dev := filepath.Join(sysfs, "sys", "class", "drm", "card1", "device")
	hw := filepath.Join(dev, "hwmon", "hwmon0")
	if err := os.MkdirAll(hw, 0o700); err != nil {
		return "", err
	}
	for p, v := range map[string]string{
		filepath.Join(dev, "mem_info_vram_total"): "25769803776", filepath.Join(dev, "mem_info_vram_used"): "1073741824",
		filepath.Join(dev, "gpu_busy_percent"): "0", filepath.Join(hw, "temp1_input"): "45000", filepath.Join(hw, "power1_average"): "30000000",
	} {
		if err := os.WriteFile(p, []byte(v+"\n"), 0o600); err != nil {
			return "", err
		}
	}

	// The arc reports its memory as llama-server --list-devices prints it (Intel Arc has
	// no VRAM figures in sysfs): here a file the telemetry command prints.
	arcReport := filepath.Join(cfg.DataDir, "arc-devices.txt")
	if err := os.WriteFile(arcReport, []byte("Available devices:\n  SYCL0: Intel(R) Arc(TM) A770 Graphics (16225 MiB, 15000 MiB free)\n"), 0o600); err != nil {
		return "", err
	}

	// The arc: an upstream backend, the stack's model itself.
	arc := map[string]any{"kind": "upstream", "url": modelURL, "apiKeyEnv": modelKeyEnv}
	// The xtx: a process backend, one model server per loaded model (this binary run
	// again, modelchild.go), so a job for the other work model swaps the xtx's model —
	// drain, SIGTERM, the memory check, a new process, its load time and readiness — as a
	// llama-server per model would.
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	pids := filepath.Join(cfg.DataDir, "model-servers")
	if err := os.MkdirAll(pids, 0o700); err != nil {
		return "", err
	}
	argv := []string{exe, modelServerArg, "-model", "{model}", "-port", "{port}", "-context", "{context}",
		"-upstream", modelURL, "-load-time", cfg.ModelLoadTime.String(), "-pid-dir", pids}
	if modelKeyEnv != "" {
		argv = append(argv, "-key-env", modelKeyEnv)
	}
	if cfg.ModelURL != "" {
		argv = append(argv, "-upstream-model", "chat") // a real MODEL_URL: what the routes asked of it before
	}
	xtx := map[string]any{"kind": "process", "command": argv, "apiKeyEnv": modelKeyEnv}
	c := map[string]any{"devices": []any{
		map[string]any{"name": "arc", "slots": 4, "backend": arc, "models": map[string]any{"chat": map[string]any{"context": 131072}},
			"telemetry": map[string]any{"kind": "device-report", "device": "SYCL0", "command": []string{"cat", arcReport}}},
		map[string]any{"name": "xtx", "slots": 1, "backend": xtx, "idleUnload": "3s",
			// research and coding run on different models (stack.go's routes); "chat" is
			// what the work route served before there were two (a data directory made then).
			"models": map[string]any{devResearchModel: map[string]any{"context": 131072}, devCodingModel: map[string]any{"context": 131072},
				"chat": map[string]any{"context": 131072}},
			"telemetry": map[string]any{"kind": "amd-sysfs", "card": "card1", "root": sysfs},
			"immich":    map[string]any{"url": s.URL + "/_dev/immich", "apiKeyEnv": immichKeyEnv, "queues": devImmichQueues}},
	}}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return "", err
	}
	p := filepath.Join(cfg.DataDir, "gpu.json")
	return p, os.WriteFile(p, b, 0o600)
}
