#!/usr/bin/env bash
# Run here (not on the GPU machine) before a device call: the GPU machine has no GoogleTest, so
# check.sh builds it from a copy of Debian's source package placed in the git-ignored .gpu-deps/.
# Then call the device tool with carry [".gpu-deps"] and the command `bash scripts/gpu/check.sh`.
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.gpu-deps/' .git/info/exclude 2>/dev/null || echo '/.gpu-deps/' >>.git/info/exclude
scripts/install-deps.sh
rm -rf .gpu-deps/googletest
mkdir -p .gpu-deps
cp -r /usr/src/googletest .gpu-deps/googletest
# CLI11 (header-only) for the command-line tool (check.sh with BUILD_TOOLS=ON).
rm -rf .gpu-deps/cli11
mkdir -p .gpu-deps/cli11/include .gpu-deps/cli11/share/cmake
cp -r /usr/include/CLI .gpu-deps/cli11/include/
cp -r /usr/share/cmake/CLI11 .gpu-deps/cli11/share/cmake/
# The Python package's build and test requirements the GPU machine (Python 3.12, PyTorch 2.11,
# no network) may lack, as wheels (check.sh's python stage installs them from there).
rm -rf .gpu-deps/wheels
grep -v -e '^#' -e '^torch' python/requirements-test.txt >/tmp/tileattn-gpu-requirements.txt
python3 -m pip download -q --disable-pip-version-check --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
  -d .gpu-deps/wheels -r /tmp/tileattn-gpu-requirements.txt
echo "prepared .gpu-deps/googletest, cli11 and wheels ($(du -sh .gpu-deps | cut -f1))"
