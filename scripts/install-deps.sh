#!/usr/bin/env bash
# Installs the Debian 12 packages that building and testing tileattn needs (idempotent).
set -euo pipefail
# clang, its libFuzzer/sanitizer runtimes (libclang-rt-14-dev) and its OpenMP (libomp-dev):
# the fuzz preset, which CI builds (docs/fuzzing.md). clang-format-14 and clang-tidy-14: the
# lint stage (scripts/lint.sh), pinned to version 14 because formatting differs between versions.
# python3-venv and python3-dev: the Python package's virtualenv and extension build
# (scripts/python-tests.sh).
packages=(cmake ninja-build g++ libgtest-dev libgmock-dev libbenchmark-dev libopenblas-dev
          libcli11-dev time clang libclang-rt-14-dev libomp-dev clang-format-14 clang-tidy-14
          python3-venv python3-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
