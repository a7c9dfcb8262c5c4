# Private Assistant — developer entry points. See README.md.
SHELL := /bin/bash
GO ?= go
export PATH := /usr/local/go/bin:$(PATH)

.PHONY: release pa pa-stream probe smoke deps dev test vet unit bench load chaos package bootstrap web-dist appwrite-json appwrite-plan appwrite-apply emulator

## deps: install what is missing on this machine (redis-server and chromium from Debian, npm packages)
deps:
	@scripts/install-deps.sh

## dev: the whole stack on one origin (http://127.0.0.1:8080), with a demo login (installs what
## is missing but not llama-server, which only its tests need; prints how long start-up took)
dev:
	@export PA_DEV_T0=$$(date +%s%N); PA_SKIP_LLAMA=1 scripts/install-deps.sh && $(GO) run ./scripts/dev

## test: every check CI runs (starts its own Redis and emulators)
test: deps vet unit

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }

## unit: go test -race over every package. scripts/dev (the browser suite: mostly waiting on
## streams and timers, the longest package by far) is built first, then runs beside all the
## others; its output (in build/unit-scripts-dev.log) is printed when both are done.
DEV_PKG := privateassistant/scripts/dev
unit:
	@mkdir -p build
	$(GO) test -race -count=1 -run '^$$' $(DEV_PKG)
	@$(GO) test -race -count=1 -timeout 25m $(DEV_PKG) >build/unit-scripts-dev.log 2>&1 & dev=$$!; \
	echo "$(GO) test -race -count=1 -timeout 25m $(DEV_PKG) (in the background, into build/unit-scripts-dev.log)"; \
	echo "$(GO) test -race -count=1 -timeout 20m <every other package>"; \
	$(GO) test -race -count=1 -timeout 20m $$($(GO) list ./... | grep -vx '$(DEV_PKG)'); rest=$$?; \
	wait $$dev; devrc=$$?; cat build/unit-scripts-dev.log; \
	test $$rest -eq 0 -a $$devrc -eq 0

## chaos: 100 SIGKILL trials of the agent at random points (prints its seed; PA_CHAOS_SEED=N repeats one),
## then the outage tests (Appwrite down 10 minutes: PA_APPWRITE_OUTAGE; Redis restarted from its AOF; Redis wiped),
## and 5,000 runs through Redis retention (memory back within 10%). Not part of `make test`.
chaos: deps
	PA_CHAOS_TRIALS=$${PA_CHAOS_TRIALS:-100} PA_APPWRITE_OUTAGE=$${PA_APPWRITE_OUTAGE:-10m} $(GO) test -race -count=1 -timeout 40m -run 'TestSIGKILLAtTwentyRandomPoints|TestOutage' ./agent/daemon/
	$(GO) test -count=1 -run TestFiveThousandRunsLeaveRedisAsTheyFoundIt ./agent/outbox/

## bench: every benchmark, each at the benchtime chosen for it (scripts/bench/plan.go), each figure printed
## beside the floor measured in the same run, then a summary against the goals (~10 minutes on 2 cores; the
## real-Hermes and llama-server ones need `make deps`, else they skip and say so); report in build/bench.txt,
## everything printed in build/bench.log. BENCH=regexp runs only those (make bench BENCH=Gateway).
bench: deps
	$(GO) run ./scripts/bench -run '$(BENCH)'

## load: 1,000 SSE followers on one stream process (pa-stream) while 50 admissions/s go through a 5-worker function host (loopback, 2-6 minutes;
## fails when admission p99 with followers > 1.2x without, on any error or on a function execution caused by a follower; PA_LOAD_* in scripts/load),
## then 10,000 SSE followers on one stream process for 60 s (memory, CPU, delivery p99), then ten real minutes of one user's CLI and web use
## under Appwrite 1.9.6's abuse limits without one 429 (make test runs them simulated)
load: deps
	$(GO) test -tags load -run '^TestLoad$$' -count=1 -v -timeout 10m ./scripts/load/
	$(GO) test -tags load -run '^TestLoadStreamCapacity$$' -count=1 -v -timeout 10m ./scripts/load/
	PA_SIM_REALTIME=1 $(GO) test -run '^TestTenMinutesOfCLIAndWebUse$$' -count=1 -v -timeout 15m ./cmd/pa/

## package: a self-contained bundle per Appwrite Function in build/functions/<name>
package:
	$(GO) run ./scripts/package

## web-dist: the production web chat in build/web (config from .env, vendored libraries, no demo)
web-dist: deps
	$(GO) run ./scripts/web-dist

## bootstrap: initial harness profiles, routes and settings from a reviewed file
BOOTSTRAP_FILE ?= deploy/bootstrap.json
bootstrap:
	$(GO) run ./scripts/bootstrap $(BOOTSTRAP_FILE)

## appwrite-json: regenerate appwrite.json from schema/
appwrite-json:
	$(GO) run ./scripts/appwrite-json

## appwrite-plan / appwrite-apply: provision the Appwrite project named in .env
appwrite-plan:
	$(GO) run ./scripts/provision plan

appwrite-apply:
	$(GO) run ./scripts/provision apply

## release: after the functions are deployed, build the agent for its versioned install
## (build/releases/$(AGENT_VERSION)/pa-agent → /opt/privateassistant/releases/$(AGENT_VERSION)) and record the
## release (active function deployment ids, agent build version, schema version) in deploy/releases (pa admin release)
AGENT_VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo devel)
release:
	$(GO) build -o build/releases/$(AGENT_VERSION)/pa-agent ./agent
	$(GO) run ./cmd/pa admin release -agent-version $(AGENT_VERSION)

## pa-stream: build the stream service into build/pa-stream (deploy/systemd/privateassistant-stream.service)
pa-stream:
	$(GO) build -o build/pa-stream ./stream/cmd/pa-stream

## pa: build the user CLI into build/pa (`build/pa help`; `go run ./cmd/pa` works too)
pa:
	$(GO) build -o build/pa ./cmd/pa

## smoke: check a deployed stack end to end (web, functions, Appwrite, a member's view, the agent's
## ops listener; reads only unless PA_SMOKE_PROMPT=1). Against make dev:
## make smoke PA_SMOKE_EMAIL=demo@example.com PA_SMOKE_PASSWORD=<printed> PA_SMOKE_OPS_URL=<printed ops origin>
smoke:
	$(GO) run ./scripts/smoke

## probe: read Appwrite's version and Hermes's capabilities (no prompt, no GPU)
probe:
	$(GO) run ./scripts/probe

## emulator: run the Appwrite emulator on its own (data in .dev/appwrite; PA_APPWRITE_ENGINE=mongodb|mariadb|ideal picks the engine)
emulator:
	$(GO) run ./schema/appwritetest/cmd/appwrite-emulator -data .dev/appwrite -engine "$(PA_APPWRITE_ENGINE)"
