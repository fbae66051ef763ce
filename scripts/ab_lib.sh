#!/usr/bin/env bash
# ab_lib.sh: what scripts/kernel-ab.sh and scripts/host-ab.sh share, sourced by them (after their
# own argument checks): ab_build configures and builds two trees side by side, ab_alternate runs
# a side's command old, new, old, new, ... Running it directly prints this help.
#
#   ab_build NAME OLD_SRC OLD_BUILD NEW_BUILD OUT "OLD_TARGETS" "NEW_TARGETS"
#     configures OLD_SRC into OLD_BUILD and this directory into NEW_BUILD (Ninja, Release,
#     DCHECKS off, CMAKE_CUDA_ARCHITECTURES or sm_90) and builds both at once (the old with a
#     third of JOBS, default nproc); logs OUT/cfg_{old,new}.log and OUT/build_{old,new}.log;
#     returns 1 naming NAME and the logs when a step fails. AB_CMAKE_EXTRA: more -D options.
#   ab_alternate NAME ROUNDS RUN
#     calls `RUN SIDE ROUND` for ROUND = 1..ROUNDS and SIDE = old then new, printing each rc;
#     returns 1 when any run failed (every run is still made).
case "${1:-}" in -h|--help) sed -n '2,/^case /p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;; esac

ab_build() {
  local name=$1 old_src=$2 old_build=$3 new_build=$4 out=$5 old_targets=$6 new_targets=$7
  local arch=${CMAKE_CUDA_ARCHITECTURES:-90} jobs=${JOBS:-$(nproc)}
  # shellcheck disable=SC2206
  local cfg=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch"
             -DATTNRT_DCHECKS=OFF ${AB_CMAKE_EXTRA:-})
  cmake -S "$old_src" -B "$old_build" "${cfg[@]}" > "$out/cfg_old.log" 2>&1 &&
    cmake -S . -B "$new_build" "${cfg[@]}" > "$out/cfg_new.log" 2>&1 ||
    { echo "$name: configure failed ($out/cfg_*.log)" >&2; return 1; }
  # shellcheck disable=SC2086
  cmake --build "$old_build" -j $(( (jobs + 2) / 3 )) --target $old_targets \
    > "$out/build_old.log" 2>&1 &
  local old_pid=$!
  # shellcheck disable=SC2086
  cmake --build "$new_build" -j "$jobs" --target $new_targets > "$out/build_new.log" 2>&1
  local new_rc=$?
  wait $old_pid
  local old_rc=$?
  if [ $new_rc -ne 0 ] || [ $old_rc -ne 0 ]; then
    echo "$name: build failed (new rc=$new_rc, old rc=$old_rc; $out/build_*.log)" >&2
    return 1
  fi
}

ab_alternate() {
  local name=$1 rounds=$2 run=$3 status=0 i side rc
  for i in $(seq 1 "$rounds"); do
    for side in old new; do
      "$run" "$side" "$i"
      rc=$?
      echo "$name: $side round $i rc=$rc at $(date -u +%T)"
      [ $rc -eq 0 ] || status=1
    done
  done
  return $status
}
