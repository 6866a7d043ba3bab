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
echo "prepared .gpu-deps/googletest ($(du -sh .gpu-deps | cut -f1))"
