#!/usr/bin/env bash
# Obtains Debian sid's llama-server (llama.cpp-tools) and runs it on this Debian 12
# machine without touching the system (contracts/gpu.md §8, route 1): the sid packages
# and the sid libc they need are extracted under DEST, the binary's interpreter is
# patched to the extracted loader, and DEST/llama-server is a wrapper that sets the
# library path and the CPU backend for the server's environment only.
#
#   scripts/llama/fetch.sh [DEST]     (default .cache/llama; prints DEST/llama-server)
#
# It fails soft: when sid cannot be reached or its packages changed shape, it exits 3
# and the llama-server tests skip with that message.
set -euo pipefail
dest=$(realpath -m "${1:-.cache/llama}")
if [ -x "$dest/llama-server" ] && "$dest/llama-server" --version >/dev/null 2>&1; then
  echo "$dest/llama-server"; exit 0
fi
command -v patchelf >/dev/null || { apt-get install -y -qq patchelf >/dev/null 2>&1 || { echo "patchelf missing" >&2; exit 3; }; }
apt="$dest/apt"
rm -rf "$dest/root" "$dest/debs"
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$dest/debs" "$dest/root"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian sid main" > "$apt/sources.list"
opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
      -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o Debug::NoLocking=1
      -o APT::Get::AllowUnauthenticated=false -o Acquire::Retries=2)
if ! apt-get "${opts[@]}" -qq update >&2; then
  echo "Debian sid is unreachable" >&2; exit 3
fi
pkgs=(llama.cpp-tools libllama0 libggml0 libc6 libstdc++6 libgcc-s1 libgomp1 libssl3t64)
(cd "$dest/debs" && apt-get "${opts[@]}" -qq download "${pkgs[@]}" >&2) || { echo "sid packages could not be downloaded" >&2; exit 3; }
for d in "$dest"/debs/*.deb; do dpkg-deb -x "$d" "$dest/root"; done
bin="$dest/root/usr/bin/llama-server"
ld=$(ls "$dest"/root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$dest"/root/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 2>/dev/null | head -1 || true)
[ -x "$bin" ] && [ -n "$ld" ] || { echo "unexpected package layout" >&2; exit 3; }
patchelf --set-interpreter "$ld" "$bin"
libs="$dest/root/usr/lib/x86_64-linux-gnu/llama:$dest/root/usr/lib/x86_64-linux-gnu:$dest/root/lib/x86_64-linux-gnu"
# The baseline x86-64 CPU backend runs on any machine this runs on.
cpu="$dest/root/usr/lib/x86_64-linux-gnu/ggml/backends0/libggml-cpu-x64.so"
[ -f "$cpu" ] || { echo "no CPU backend in libggml0" >&2; exit 3; }
cat > "$dest/llama-server" <<WRAP
#!/bin/sh
# llama-server from Debian sid, run against its own extracted libraries.
LD_LIBRARY_PATH="$libs" GGML_BACKEND_PATH="$cpu" exec "$bin" "\$@"
WRAP
chmod +x "$dest/llama-server"
"$dest/llama-server" --version >&2 || { echo "the extracted llama-server does not run" >&2; exit 3; }
echo "$dest/llama-server"
