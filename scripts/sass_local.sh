#!/usr/bin/env bash
# SASS of a cubin on a machine without cuobjdump / nvdisasm (the dev VM): Debian's non-free
# nvidia-cuda-toolkit (CUDA 11.8) has nvdisasm, which decodes sm_90a code (HGMMA included) but
# not the ELF header that nvcc 13 writes, so the header's OS ABI and flags are rewritten to the
# CUDA 11 form in a copy first (sm_80 and sm_90a cubins checked).
#
#   bash scripts/sass_local.sh FILE.cubin > FILE.sass
#   (a cubin: nvcc ... -gencode arch=compute_90a,code=sm_90a -cubin -o FILE.cubin SOURCE.cu,
#   or code=sm_80)
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
sm = (struct.unpack_from('<I', elf, 0x30)[0] >> 8) & 0xff  # nvcc 13: the SM in bits 8-15
elf[7], elf[8] = 0x33, 7                      # OS ABI and ABI version of CUDA 11 cubins
# CUDA 11 e_flags: the SM in bits 0-7 and (virtual) 16-23, 0x500 for 64-bit addresses
struct.pack_into('<I', elf, 0x30, sm | 0x500 | sm << 16)
open(sys.argv[2], 'wb').write(elf)
PY
# nvdisasm 11.8 prints nothing for opcodes it does not know (sm_90's VIADD, 0x836, above all:
# dozens per kernel, some of them branch targets, whose labels go missing too). The encodings
# are printed (-hex) and every instruction word pair without text becomes a placeholder line,
# "UNDECODED.0x836 ;", so that counts, addresses and line distances stay true.
"$TOOLS/usr/bin/nvdisasm" -c -hex "$copy" | python3 -c '
import re, sys
pending = None  # address of the last printed instruction, or None after its control word
for line in sys.stdin:
    m = re.match(r"^(\s+/\*([0-9a-f]+)\*/\s+.*?)\s*/\* 0x[0-9a-f]{16} \*/\s*$", line)
    if m:
        print(m.group(1))
        pending, words = int(m.group(2), 16), 1
        continue
    m = re.match(r"^\s+/\* (0x[0-9a-f]{16}) \*/\s*$", line)
    if m and pending is not None:
        if words == 1:  # the control word of the printed instruction
            words = 2
        elif words == 2:  # first word of an instruction that has no text
            pending += 16
            op = int(m.group(1), 16) & 0xFFF
            print("        /*%04x*/                   UNDECODED.%#x ;" % (pending, op))
            words = 3
        else:
            words = 2
        continue
    print(line, end="")
'
