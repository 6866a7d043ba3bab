#!/usr/bin/env python3
"""The loops of two builds' kernels side by side, from SASS text (scripts/sass_local.sh here,
cuobjdump -sass on the device):

    python3 scripts/sass_loops.py base.sass new.sass [--kernel SUBSTRING] [--min 200]

For every kernel of the first file whose name contains SUBSTRING and that the second file also
has: its instruction count, then each loop of at least --min instructions (a backward branch and
the code it jumps over), in address order, paired with the other file's: instructions, local
memory loads and stores (spill reloads and spills), and whether the opcode sequences are the
same. A kernel change whose step loops keep their counts and spill reloads changes only what
lies outside them; one that adds reloads to a step loop costs every step (the check to run
before device time is spent).
"""
import argparse
import re

INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);")
PREDICATE = re.compile(r"^@!?U?P\w+\s+")


def kernels(path):
    text = open(path, encoding="utf-8").read()
    out = {}
    for chunk in re.split(r"\n\s*Function : ", text)[1:]:
        name = chunk.split("\n", 1)[0].strip()
        out[name] = [(int(a, 16), PREDICATE.sub("", t.strip())) for a, t in INSTR.findall(chunk)]
    return out


def loops(code, minimum):
    index = {address: i for i, (address, _) in enumerate(code)}
    found = []
    for i, (address, text) in enumerate(code):
        if not text.startswith("BRA"):
            continue
        target = re.search(r"0x([0-9a-f]+)\s*$", text)
        if target is None:
            continue
        start = index.get(int(target.group(1), 16))
        if start is not None and start < i and i - start + 1 >= minimum:
            found.append(code[start:i + 1])
    return found


def summary(loop):
    ops = [text.split()[0] for _, text in loop]
    return ops, sum(op.startswith("LDL") for op in ops), sum(op.startswith("STL") for op in ops)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base")
    parser.add_argument("new")
    parser.add_argument("--kernel", default="")
    parser.add_argument("--min", type=int, default=200, help="shortest loop shown")
    args = parser.parse_args()
    base, new = kernels(args.base), kernels(args.new)
    for name, code in base.items():
        if args.kernel not in name or name not in new:
            continue
        print(f"{name}: {len(code)} -> {len(new[name])} instructions")
        for a, b in zip(loops(code, args.min), loops(new[name], args.min)):
            (ops_a, ldl_a, stl_a), (ops_b, ldl_b, stl_b) = summary(a), summary(b)
            print(f"  loop {len(a)} -> {len(b)} instructions, LDL {ldl_a} -> {ldl_b}, "
                  f"STL {stl_a} -> {stl_b}, same opcodes: {ops_a == ops_b}")


if __name__ == "__main__":
    main()
