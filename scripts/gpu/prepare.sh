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
echo "prepared .gpu-deps/googletest ($(du -sh .gpu-deps | cut -f1))"
