#!/usr/bin/env bash
# Sets up (apt, when missing), builds attnrt and runs the demo: many threads submit decode
# requests to the runtime, which batches them and runs them on the GPU if one is present, else on
# the CPU executor, checks every output against the CPU reference and prints a short report.
# Extra arguments go to the demo (see: build/examples/demo --help).
set -euo pipefail
case "${1:-}" in -h|--help) sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;; esac
cd "$(dirname "$0")/.."
./scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build} ./scripts/build.sh
"./${BUILD_DIR:-build}/examples/demo" "$@"
