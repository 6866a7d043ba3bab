#!/usr/bin/env python3
"""Summarises a trace file written by scripts/gpu/trace_fwd.sh (a -DTILEATTN_FWD_TRACE build),
one section per traced launch (each named by the benchmark row printed after it).

Key blocks: the median clocks of each phase over blocks 3 and later of both warpgroups' traced
tile, and the period (loop top to the next loop top); then every block of that tile. Tiles: per
tile of each warpgroup, the clocks from the loop top to the tile index, to Q ready, through the
key blocks, through the epilogue, and to the next tile's loop top; and the medians of those over
the tiles.

    python3 scripts/gpu/trace_summary.py trace_64_1024.txt
"""
import re
import statistics
import sys
from collections import defaultdict

BLOCK_POINTS = ["top", "turn", "K ready", "S issued", "PV issued", "S ready", "softmax done",
                "PV done"]
TILE_PHASES = ["top -> index", "index -> Q ready", "Q -> last PV done", "epilogue",
               "-> next top"]
EPILOGUE_PHASES = ["1/l", "buffer free", "written", "stores issued", "lse"]


def sections(path):
    """Yields (label, lines) per "trace launch" section."""
    label, lines, labelled = "trace", [], True
    for line in open(path):
        if line.startswith("trace launch"):
            if lines:
                yield label, lines
            label, lines, labelled = line.strip(), [], False
        elif line.startswith("trace"):
            lines.append(line)
        else:
            m = re.match(r"\s+(\d+)\s+([01])\s+(\d+)\s", line)
            if m and not labelled and label is not None:
                label += f" (D {m[1]}, causal {m[2]}, L {m[3]})"
                labelled = True
    if lines:
        yield label, lines


def summarise(lines):
    blocks, tiles = {}, defaultdict(dict)
    for line in lines:
        m = re.match(r"trace wg (\d+) block (\d+): (.*)", line)
        if m:
            blocks[(int(m[1]), int(m[2]))] = [int(x) for x in m[3].split()]
            continue
        m = re.match(r"trace wg (\d+) tile (\d+) blocks (-?\d+): (.*)", line)
        if m:
            tiles[int(m[1])][int(m[2])] = (int(m[3]), [int(x) for x in m[4].split()])

    if blocks:
        phases = defaultdict(list)
        for (wg, b), t in blocks.items():
            if b < 3:
                continue
            for k in range(1, len(BLOCK_POINTS)):
                phases[BLOCK_POINTS[k]].append(t[k] - t[k - 1])
            nxt = blocks.get((wg, b + 1))
            if nxt:
                phases["-> next top"].append(nxt[0] - t[-1])
                phases["period"].append(nxt[0] - t[0])
        print("key blocks (medians, clocks):")
        for name, values in phases.items():
            print(f"  {name:14s} {statistics.median(values):8.0f}  (n {len(values)})")
        # Every block of the traced tile (under a causal mask its last block is the diagonal):
        # its start against warpgroup 0's block 0, then each phase.
        origin = blocks.get((0, 0), next(iter(blocks.values())))[0]
        print("key blocks of the traced tile (clocks; start from warpgroup 0's block 0):")
        print("  wg block  start " + " ".join(f"{p:>12s}" for p in BLOCK_POINTS[1:]))
        for (wg, b) in sorted(blocks):
            t = blocks[(wg, b)]
            cells = " ".join(f"{t[k] - t[k - 1]:12d}" for k in range(1, len(BLOCK_POINTS)))
            print(f"  {wg:2d} {b:5d} {t[0] - origin:6d} {cells}")

    if tiles:
        medians = defaultdict(list)
        for wg in sorted(tiles):
            print(f"tiles of warpgroup {wg} (clocks):")
            print("  tile blocks " + " ".join(f"{p:>18s}" for p in TILE_PHASES))
            for i in sorted(tiles[wg]):
                n, t = tiles[wg][i]
                row = [t[1] - t[0], t[2] - t[1], t[3] - t[2], t[4] - t[3]]
                nxt = tiles[wg].get(i + 1)
                row.append(nxt[1][0] - t[4] if nxt else None)
                for name, value in zip(TILE_PHASES, row):
                    if value is not None and i > 0:
                        medians[name].append(value)
                cells = " ".join(f"{'-' if v is None else v:>18}" for v in row)
                print(f"  {i:4d} {n:6d} {cells}")
        print("tile medians (tiles 1 and later, both warpgroups):")
        for name in TILE_PHASES:
            if medians[name]:
                print(f"  {name:18s} {statistics.median(medians[name]):8.0f}")
        # Inside the staged epilogue (stamps 5-8, where the trace build has them; a stamp
        # left at 0 was not reached): last P V done -> 1 / l -> buffer free -> buffer written
        # -> TMA stores issued -> epilogue done.
        parts = defaultdict(list)
        for wg in sorted(tiles):
            for i, (n, t) in tiles[wg].items():
                if i == 0 or len(t) < 9 or 0 in t[5:9]:
                    continue
                points = [t[3], t[5], t[6], t[7], t[8], t[4]]
                for name, a, b in zip(EPILOGUE_PHASES, points, points[1:]):
                    parts[(wg, name)].append(b - a)
        if parts:
            print("staged epilogue (medians over tiles 1 and later, clocks):")
            for wg in sorted(tiles):
                cells = " ".join(f"{name} {statistics.median(parts[(wg, name)]):.0f},"
                                 for name in EPILOGUE_PHASES if parts[(wg, name)])
                print(f"  warpgroup {wg}: {cells.rstrip(',')}")
        # The warpgroups' offset (same SM clock): warpgroup 1's stamp minus warpgroup 0's.
        if 0 in tiles and 1 in tiles:
            for k, name in ((0, "loop top"), (3, "last P V done"), (4, "epilogue done")):
                offsets = [tiles[1][i][1][k] - tiles[0][i][1][k] for i in tiles[0]
                           if i > 0 and i in tiles[1]]
                if offsets:
                    print(f"  warpgroup 1 - 0 at {name}: median {statistics.median(offsets):.0f}")


def main(path):
    for label, lines in sections(path):
        print(f"== {label}")
        summarise(lines)


if __name__ == "__main__":
    main(sys.argv[1])
