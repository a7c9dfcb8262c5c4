#!/usr/bin/env bash
# Regenerates requirements.lock (every transitive pin with its sha256 hashes) from
# requirements.in, with pip-tools in a throwaway virtualenv. Run it after changing the
# pinned Hermes version, then check deploy/hermes/README.md still tells the truth.
set -euo pipefail
cd "$(dirname "$0")"
py="$(./python.sh)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$py" -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install --quiet --disable-pip-version-check pip-tools==7.6.2
"$tmp/venv/bin/pip-compile" --quiet --generate-hashes --allow-unsafe --strip-extras \
  --no-emit-find-links --no-emit-index-url --resolver=backtracking \
  --output-file=requirements.lock requirements.in
echo "lock.sh: requirements.lock regenerated with $("$py" --version)"
