#!/usr/bin/env bash
# Installs what the project needs on a bare Debian machine, and nothing that is already
# there: redis-server (Debian package) for the dedicated queue Redis and the tests.
# Safe to re-run. Needs root (or sudo) only when something is missing.
set -euo pipefail

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)

if [ ${#need[@]} -gt 0 ]; then
  sudo=""
  if [ "$(id -u)" != "0" ]; then sudo="sudo"; fi
  echo "install-deps: installing ${need[*]} from Debian"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # The Debian package starts a system redis on 6379; the project never uses it.
  if command -v systemctl >/dev/null 2>&1; then $sudo systemctl disable --now redis-server >/dev/null 2>&1 || true; fi
fi
