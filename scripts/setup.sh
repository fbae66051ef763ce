#!/usr/bin/env bash
# Installs attnrt's build dependencies from the distro when missing (idempotent; Debian/Ubuntu).
# The CUDA toolkit (nvcc, cuBLAS) is looked for at /usr/local/cuda or on PATH; without it attnrt
# builds for the CPU executor only.
set -euo pipefail
case "${1:-}" in -h|--help) sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;; esac
pkgs=(cmake ninja-build g++ libspdlog-dev libboost-dev libconcurrentqueue-dev libgtest-dev
      libgmock-dev libbenchmark-dev pkg-config python3 libcli11-dev nlohmann-json3-dev
      python3-matplotlib)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: dependencies present"
fi
if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: nvcc not found: building for the CPU executor only (install the CUDA toolkit," \
       "nvcc and cuBLAS, for the GPU executor)" >&2
fi
