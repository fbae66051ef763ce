#!/usr/bin/env bash
# Fails on any dependency arrow the design forbids (the layers below), from the tree's
# `#include` lines and its CMake link lines:
#   include/attnrt/*.h (public, installed) include only <attnrt/...> public headers and the
#                     standard library: no CUDA header, no tree header, no third-party header
#   api/ leaf sources include only api/ and the public headers
#   <attnrt/runtime.h>, <attnrt/c_api.h> (the facade) only from api/, tests, bench, examples
#   a file that tests ATTNRT_WITH_CUDA includes <attnrt/version.h>, which defines it
#   kvcache/          includes api/ and kvcache/ only (never kernels/, runtime/, scheduler/)
#   kernels/          includes api/ and kernels/ only
#   runtime/          never includes scheduler/
#   scheduler/        includes api/, scheduler/ and runtime/executor.h only; no CUDA header
#   bench/, examples/ never include each other's files: what they share lives in tools/
# and the same for the CMake targets: attnrt_kvcache and attnrt_kernels link no other component,
# attnrt_scheduler links runtime only through attnrt_executor_interface, and no CUDA library.
# Usage: scripts/check-layers.sh [--help]. Exit 1 and one line per violation when any.
set -uo pipefail
case "${1:-}" in -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
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

# public_header_check FILE: a public header reaches nothing a consumer of the installed package
# lacks: only <attnrt/x.h> that exists in include/attnrt/, and standard headers (no '/' in the
# name); never a CUDA header, a "quoted" (tree) header or a third-party one.
public_header_check() {
  local f=$1 inc
  while IFS= read -r inc; do report "$f (public) includes \"$inc\": only <attnrt/...> and standard headers"; done < <(includes "$f")
  while IFS= read -r inc; do
    if is_cuda_header "$inc"; then
      report "$f (public) includes <$inc>: no CUDA header in a public header"
    elif [[ "$inc" == attnrt/* ]]; then
      [ -f "include/$inc" ] || [ -f "include/$inc.in" ] || report "$f (public) includes <$inc>, which is not a public header"
    elif [[ "$inc" == */* || "$inc" == concurrentqueue* ]]; then
      report "$f (public) includes <$inc>: not a public or standard header"
    fi
  done < <(system_includes "$f")
}
for f in include/attnrt/*.h include/attnrt/*.h.in; do [ -f "$f" ] && public_header_check "$f"; done
[ -d api ] && for f in $(find api -maxdepth 1 -name '*.h'); do
  case "$f" in api/check.h) ;; *) report "$f: public headers live in include/attnrt/" ;; esac
done
# The facade's headers: only from the facade itself and the programs over it.
for f in $(sources kvcache) $(sources kernels) $(sources runtime) $(sources scheduler); do
  while IFS= read -r inc; do
    case "$inc" in attnrt/runtime.h|attnrt/c_api.h) report "$f includes <$inc>: the facade sits above every component" ;; esac
  done < <(system_includes "$f")
done
# ATTNRT_WITH_CUDA is 0 or 1 from the generated <attnrt/version.h>: where it is not included,
# "#if ATTNRT_WITH_CUDA" would silently read 0.
for f in $(find api kvcache kernels runtime scheduler tests bench examples -type f \( -name '*.h' \
             -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' -o -name '*.c' \) | sort); do
  if grep -q '^[[:space:]]*#[[:space:]]*if.*ATTNRT_WITH_CUDA' "$f" &&
     ! system_includes "$f" | grep -qx 'attnrt/version.h'; then
    report "$f tests ATTNRT_WITH_CUDA without including <attnrt/version.h>"
  fi
done
for f in api/status.cc api/config.cc api/version.cc api/cuda_device.cc; do [ -f "$f" ] && allowed "$f" 'api/*'; done
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
for f in $(find bench examples tools -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' \) | sort); do
  for inc in $(includes "$f"); do
    case "$f:$inc" in
      bench/*:examples/*|examples/*:bench/*|tools/*:bench/*|tools/*:examples/*)
        report "$f includes \"$inc\": bench/ and examples/ share code through tools/" ;;
    esac
  done
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
