#!/usr/bin/env bash
# Prints the path of a Python the pinned Hermes supports (>=3.11,<3.14), or fails.
set -euo pipefail
for c in "${PA_HERMES_PYTHON:-}" python3.11 python3.12 python3.13 python3; do
  [ -n "$c" ] || continue
  p="$(command -v "$c" 2>/dev/null)" || continue
  if "$p" -c 'import sys, venv; sys.exit(0 if (3, 11) <= sys.version_info[:2] < (3, 14) else 1)' 2>/dev/null; then
    echo "$p"
    exit 0
  fi
done
echo "no Python >=3.11,<3.14 with the venv module found (set PA_HERMES_PYTHON)" >&2
exit 1
