#!/usr/bin/env bash
# Fails on any dependency arrow the design forbids (shared/ARCHITECTURE.md), from the tree's
# `#include "..."` lines and its CMake link lines:
#   api/*.h (public)  includes only api/ public headers and no CUDA header
#   api/ leaf sources include only api/
#   kvcache/          includes api/ and kvcache/ only (never kernels/, runtime/, scheduler/)
#   kernels/          includes api/ and kernels/ only
#   runtime/          never includes scheduler/
#   scheduler/        includes api/, scheduler/ and runtime/executor.h only; no CUDA header
# and the same for the CMake targets: attnrt_kvcache and attnrt_kernels link no other component,
# attnrt_scheduler links runtime only through attnrt_executor_interface, and no CUDA library.
# Usage: scripts/check-layers.sh [--help]. Exit 1 and one line per violation when any.
set -uo pipefail
case "${1:-}" in -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
cd "$(dirname "$0")/.."

violations=0
report() { echo "check-layers: $*"; violations=$((violations + 1)); }

# includes FILE: the project headers a file includes ("dir/name.h"), one a line.
includes() { sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$1"; }
# system_includes FILE: its <...> includes.
system_includes() { sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*<\([^>]*\)>.*/\1/p' "$1"; }
sources() { find "$1" -maxdepth 2 -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' \) | sort; }
is_cuda_header() { [[ "$1" == cuda* || "$1" == cublas* || "$1" == cuda/* || "$1" == cub/* ]]; }

# allowed FILE PATTERN...: every project include of FILE matches one of the patterns.
allowed() {
  local file=$1 inc ok p
  shift
  while IFS= read -r inc; do
    ok=0
    for p in "$@"; do [[ "$inc" == $p ]] && ok=1 && break; done
    [ $ok -eq 1 ] || report "$file includes \"$inc\" (allowed: $*)"
  done < <(includes "$file")
}
no_cuda() {
  local inc
  while IFS= read -r inc; do
    if is_cuda_header "$inc"; then report "$1 includes <$inc>: no CUDA header here"; fi
  done < <(system_includes "$1")
}

for f in api/*.h; do
  allowed "$f" 'api/*.h'
  for inc in $(includes "$f"); do
    [[ "$inc" == api/internal/* ]] && report "$f (public) includes internal \"$inc\""
  done
  no_cuda "$f"
done
for f in api/status.cc api/config.cc; do [ -f "$f" ] && allowed "$f" 'api/*'; done
for f in api/internal/*.h; do allowed "$f" 'api/*'; done
for f in $(sources kvcache); do allowed "$f" 'api/*' 'kvcache/*'; done
for f in $(sources kernels); do allowed "$f" 'api/*' 'kernels/*'; done
for f in $(sources runtime); do
  for inc in $(includes "$f"); do
    [[ "$inc" == scheduler/* ]] && report "$f includes \"$inc\": runtime knows nothing of the scheduler"
  done
done
for f in $(sources scheduler); do
  allowed "$f" 'api/*' 'scheduler/*' 'runtime/executor.h' 'concurrentqueue.h'
  no_cuda "$f"
done

# CMake: the link line of a component (its attnrt_link / target_link_libraries arguments).
links() { tr '\n' ' ' <"$1/CMakeLists.txt" | grep -o "attnrt_link(attnrt_$1 [^)]*)" ; }
for lib in $(links kvcache); do
  case "$lib" in attnrt_kernels|attnrt_runtime|attnrt_scheduler|attnrt) report "attnrt_kvcache links $lib" ;; esac
done
for lib in $(links kernels); do
  case "$lib" in attnrt_kvcache|attnrt_runtime|attnrt_scheduler|attnrt) report "attnrt_kernels links $lib" ;; esac
done
for lib in $(links scheduler); do
  case "$lib" in
    attnrt_runtime|attnrt_kernels|attnrt_kvcache|attnrt|CUDA::*) report "attnrt_scheduler links $lib" ;;
  esac
done
links scheduler | grep -q attnrt_executor_interface ||
  report "attnrt_scheduler does not link attnrt_executor_interface (its one edge into runtime/)"

if [ $violations -gt 0 ]; then
  echo "check-layers: $violations violation(s)"
  exit 1
fi
echo "check-layers: OK"
