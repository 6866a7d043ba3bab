#!/usr/bin/env bash
# SASS of a cubin on a machine without cuobjdump / nvdisasm (the dev VM): Debian's non-free
# nvidia-cuda-toolkit (CUDA 11.8) has nvdisasm, which decodes sm_90a code (HGMMA included) but
# not the ELF header that nvcc 13 writes, so the header's OS ABI and flags are rewritten to the
# CUDA 11 form (EF_CUDA_SM90) in a copy first.
#
#   bash scripts/sass_local.sh FILE.cubin > FILE.sass
#   (a cubin: nvcc ... -gencode arch=compute_90a,code=sm_90a -cubin -o FILE.cubin SOURCE.cu)
#
# The first run fetches the package (~84 MB) into /tmp/nvdisasm-11.8 (needs the non-free
# component in the apt sources; the script adds it).
set -euo pipefail
TOOLS=/tmp/nvdisasm-11.8
if [[ ! -x $TOOLS/usr/bin/nvdisasm ]]; then
  download() { (cd /tmp && apt-get download -qq nvidia-cuda-toolkit 2>/dev/null); }
  if ! download; then
    printf '%s\n' 'Types: deb' 'URIs: http://deb.debian.org/debian' 'Suites: bookworm' \
      'Components: contrib non-free' 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' \
      >/etc/apt/sources.list.d/non-free.sources
    apt-get update -qq
    download
  fi
  mkdir -p "$TOOLS"
  dpkg -x /tmp/nvidia-cuda-toolkit_*.deb "$TOOLS"
fi
copy=$(mktemp --suffix=.cubin)
trap 'rm -f "$copy"' EXIT
python3 - "$1" "$copy" <<'PY'
import struct, sys
elf = bytearray(open(sys.argv[1], 'rb').read())
elf[7], elf[8] = 0x33, 7                      # OS ABI and ABI version of CUDA 11 cubins
struct.pack_into('<I', elf, 0x30, 0x5a055a)   # e_flags: sm_90, 64-bit addresses
open(sys.argv[2], 'wb').write(elf)
PY
"$TOOLS/usr/bin/nvdisasm" -c "$copy"
