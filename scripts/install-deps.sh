#!/usr/bin/env bash
# Installs what the project needs on a bare Debian machine, and nothing that is already
# there: redis-server and redis-sentinel (the dedicated queue Redis and the tests), chromium (browser tests of
# the web chat, driven by playwright-core), firefox-esr (driven over WebDriver BiDi by puppeteer-core),
# webkit2gtk-driver and xvfb (WebKit: WebKitWebDriver driving WebKitGTK's MiniBrowser), bubblewrap (the members' Hermes sandboxes), and the web chat's npm packages. Safe to re-run.
# Needs root (or sudo) only when a Debian package is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
# Debian's Sentinel (the failover tests; redistest falls back to redis-server --sentinel).
command -v redis-sentinel >/dev/null 2>&1 || need+=(redis-sentinel)
if [ "${PA_SKIP_BROWSER:-}" != "1" ]; then
  [ -x /usr/bin/chromium ] || need+=(chromium)
  # The web chat's other engines (web/test/engines; scripts/dev TestWebChatInFirefoxAndWebKit).
  [ -x /usr/bin/firefox-esr ] || need+=(firefox-esr)
  [ -x /usr/bin/WebKitWebDriver ] || need+=(webkit2gtk-driver)
  [ -x /usr/bin/Xvfb ] || need+=(xvfb)
fi
command -v node >/dev/null 2>&1 || need+=(nodejs npm)
command -v patchelf >/dev/null 2>&1 || need+=(patchelf)
# bubblewrap: each member's Hermes runs in its own sandbox (agent/homes).
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)

if [ ${#need[@]} -gt 0 ]; then
  sudo=""
  if [ "$(id -u)" != "0" ]; then sudo="sudo"; fi
  echo "install-deps: installing ${need[*]} from Debian"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # The Debian package starts a system redis on 6379; the project never uses it.
  if command -v systemctl >/dev/null 2>&1; then $sudo systemctl disable --now redis-server redis-sentinel >/dev/null 2>&1 || true; fi
fi

# npm packages of the web chat, exactly as locked.
if [ ! -d web/node_modules/playwright-core ] || [ ! -d web/node_modules/puppeteer-core ] || [ web/package-lock.json -nt web/node_modules/.package-lock.json ]; then
  echo "install-deps: npm ci (web)"
  (cd web && npm ci --no-audit --no-fund --loglevel=error)
fi

# The official MCP conformance suite, pinned, with the Node 22 it needs (agent/mcpjobs
# TestConformance; fails under CI=true without it).
if [ ! -d agent/mcpjobs/testdata/conformance/node_modules/@modelcontextprotocol/conformance ] || [ agent/mcpjobs/testdata/conformance/package-lock.json -nt agent/mcpjobs/testdata/conformance/node_modules/.package-lock.json ]; then
  echo "install-deps: npm ci (MCP conformance suite)"
  (cd agent/mcpjobs/testdata/conformance && npm ci --no-audit --no-fund --loglevel=error)
fi

# A real llama-server for the GPU backend's integration tests (Debian sid's, extracted
# under .cache/llama; contracts/gpu.md §8). Fails soft: without it those tests skip.
if [ "${PA_SKIP_LLAMA:-}" != "1" ] && [ ! -x .cache/llama/llama-server ]; then
  echo "install-deps: fetching llama-server from Debian sid into .cache/llama"
  scripts/llama/fetch.sh .cache/llama >/dev/null 2>.cache-llama.log \
    && rm -f .cache-llama.log \
    || echo "install-deps: llama-server unavailable ($(tail -1 .cache-llama.log 2>/dev/null)); its tests skip"
fi

# The real Hermes Agent for the real-Hermes tests (hermes/hermesreal), pinned and
# hash-locked (scripts/hermes/requirements.lock; deploy/hermes/README.md). Idempotent;
# fails soft locally (those tests skip and say why), fatal with CI=true.
if [ "${PA_SKIP_HERMES:-}" != "1" ]; then
  scripts/hermes/install.sh
fi
