#!/usr/bin/env bash
# Installs the build in BUILD_DIR to a temporary prefix and builds tests/install_consumer against it
# with find_package(gnn): the installed headers, library and package config are enough to use gnn.
set -euo pipefail
build=${1:?usage: scripts/check_install.sh BUILD_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$root/tests/install_consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$tmp/consumer" -j2 >/dev/null
"$tmp/consumer/consumer" "$tmp/out.npz"
