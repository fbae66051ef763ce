#!/usr/bin/env bash
# Sets up (apt, when missing), builds attnrt and runs the demo: many threads submit decode
# requests to the runtime, which batches them and runs them on the GPU if one is present, else on
# the CPU executor, checks every output against the CPU reference and prints a short report.
# Extra arguments go to the demo (see: build/examples/demo --help).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build} ./scripts/build.sh
"./${BUILD_DIR:-build}/examples/demo" "$@"
