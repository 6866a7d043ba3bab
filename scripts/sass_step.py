#!/usr/bin/env python3
"""Instruction mix of the sm90 forward's key-block step, from SASS text (scripts/sass_local.sh
here, cuobjdump -sass on the device), one line per file:

    python3 scripts/sass_step.py main.sass new.sass [--kernel SUBSTRING]

The step is the code from one key block's first S wgmma (the one that zeroes its accumulator,
"RZ, !UPT") to the next block's, in the first kernel whose name contains SUBSTRING (default: the
fast bf16 D 64 kernel). Uniform-datapath instructions (U*) are counted together. Why it matters:
a change that makes ptxas lose the warp-uniformity of the loop's values moves the
wgmma descriptor arithmetic from uniform to vector registers (U* down, IMAD / R2UR / VIADD up),
which costs the D 64 step issue slots; check this before spending device time.

--hot: also the instructions one warp executes in an interior block whose speculation holds
(no O rescale, no mask, no redo), found by walking the step from its turn barrier and taking
the branches such a block takes, recognised by shape: unconditional ones, the two-predicate
mask skip, a voted "kept" branch (taken on a predicate a VOTE wrote shortly before), the branch into the speculative path
(@P0, 150-300 lines ahead), the skip of the O rescale (FMULs only) and short forward skips
(< 40 lines). The rules fit the fast D 64
kernel's layout when they were written; check the walk (--hot-print) after large changes.
"""
import argparse
import collections
import re

# nvdisasm 11.8 writes "gdesc [UR4]", cuobjdump 13 may omit the space: accept both.
S_WGMMA = re.compile(r"HGMMA\.64x\d+x16\.F32\.\w+ R\d+, gdesc\s*\[UR\d+\]\s*, RZ, !UPT")
INSTR = re.compile(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?(\S+)")
COLUMNS = ["FADD", "FFMA", "MUFU", "FMNMX", "F2FP", "FSEL", "FMUL", "ISETP", "U*", "IMAD",
           "R2UR", "UNDECODED", "LEA", "SHF", "LOP3", "HGMMA", "BRA"]


def kernel_lines(path, kernel):
    """The kernel's lines: nvdisasm's ("//---- .text.NAME") or cuobjdump's ("Function : NAME")."""
    lines, inside = [], False
    for line in open(path, encoding="utf-8", errors="replace"):
        header = line.startswith("//----") or "Function :" in line
        if header:
            if inside:
                break
            inside = kernel in line and (".text" in line or "Function :" in line)
            continue
        if inside:
            lines.append(line)
    return lines


def opcode(line):
    m = INSTR.match(line)
    if not m:
        return None
    op = m.group(1).split(".")[0]
    return "U*" if op.startswith("U") and op != "UNDECODED" else op


def voted(lines, i, pred):
    """Whether branch i's predicate was last written by a VOTE.ALL within the 8 lines before it."""
    reg = pred.lstrip("@!")
    for line in reversed(lines[max(0, i - 8):i]):
        m = re.match(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?(\S+)\s+(\w+)", line)
        if m and m.group(2) == reg:
            return m.group(1).startswith("VOTE.ALL")
    return False


def address(hex_digits):
    """A cuobjdump address as one key: "0x" and the digits without leading zeros."""
    return "0x" + (hex_digits.lstrip("0") or "0")


def hot_path(lines, first_s):
    labels = {}
    for i, line in enumerate(lines):
        m = re.match(r"^(\.L_x_\d+):", line)
        if m:
            labels[m.group(1)] = i
        m = re.match(r"^\s+/\*([0-9a-f]+)\*/", line)  # cuobjdump branches to addresses
        if m:
            labels.setdefault(address(m.group(1)), i)
    head = max((i for i in range(max(0, first_s - 80), first_s) if "BAR.SYNC" in lines[i]),
               default=first_s)
    branch = re.compile(r"(@!?U?P\w+)?\s*BRA\S*\s+(?:(!?U?P\w+), )?(?:`\((\.L_x_\d+)\)|(0x[0-9a-f]+))")
    path, seen, i = [], set(), head
    while i < len(lines) and i not in seen and len(path) < 4000:
        seen.add(i)
        line = lines[i]
        if opcode(line):
            if i > first_s and S_WGMMA.search(line):
                break
            path.append(line)
            m = branch.search(line)
            target = labels.get(m.group(3) or address(m.group(4)[2:])) if m else None
            if target is not None:
                pred, second = m.group(1), m.group(2)
                if pred is None or second is not None:
                    take = True
                elif voted(lines, i, pred):
                    take = not pred.startswith("@!")  # the "all kept" branch of a vote
                else:
                    ahead = target - i
                    skipped = [opcode(x) for x in lines[i + 1:target] if opcode(x)]
                    rescale = ahead > 0 and skipped.count("FMUL") > 0.9 * len(skipped)
                    take = (pred == "@P0" and 150 < ahead < 300) or 0 < ahead < 40 or rescale
                if take:
                    i = target
                    continue
        i += 1
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument(
        "--kernel", default="flash_fwd_sm90_kernelI13__nv_bfloat16Li64ENS0_18CausalWindowScoresE")
    parser.add_argument("--hot", action="store_true", help="also the interior block's hot path")
    parser.add_argument("--hot-print", action="store_true", help="print the hot path's lines")
    args = parser.parse_args()
    print("file | kernel instr | step instr | " + " | ".join(COLUMNS) + " | other")
    for path in args.files:
        lines = kernel_lines(path, args.kernel)
        if not lines:
            print(f"{path} | kernel {args.kernel} not found")
            continue
        total = sum(1 for line in lines if opcode(line))
        starts = [i for i, line in enumerate(lines) if S_WGMMA.search(line)]
        if len(starts) < 3:  # the tile's first block, then the loop's two unrolled steps
            print(f"{path} | {total} | fewer than three S wgmma groups")
            continue
        counts = collections.Counter(op for op in map(opcode, lines[starts[1]:starts[2]]) if op)
        n = sum(counts.values())
        other = n - sum(counts[c] for c in COLUMNS)
        print(f"{path} | {total} | {n} | " + " | ".join(str(counts[c]) for c in COLUMNS) +
              f" | {other}")
        if args.hot or args.hot_print:
            hot = hot_path(lines, starts[1])
            counts = collections.Counter(op for op in map(opcode, hot) if op)
            other = len(hot) - sum(counts[c] for c in COLUMNS)
            print(f"{path} (hot path) | | {len(hot)} | " +
                  " | ".join(str(counts[c]) for c in COLUMNS) + f" | {other}")
            if args.hot_print:
                print("".join(hot), end="")


if __name__ == "__main__":
    main()
