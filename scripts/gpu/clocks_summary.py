#!/usr/bin/env python3
"""Summarise the clock / power log that scripts/gpu/check.sh records during a device call.

clocks.csv lines: "timestamp, sm MHz, power W, temperature C, throttle bitmask" from nvidia-smi
(TZ=UTC), and "mark,HH:MM:SS,stage" lines the check writes when a stage starts. Prints, per
stage, the median and minimum SM clock, the peak power and temperature and the throttle reasons
seen. (Per shape, the benchmarks sample the clock themselves: bench/gpu/clock_sampler.*.)
"""
import calendar
import statistics
import sys
import time

REASONS = {0x1: "idle", 0x2: "app-clocks", 0x4: "sw-power-cap", 0x8: "hw-slowdown",
           0x10: "sync-boost", 0x20: "sw-thermal", 0x40: "hw-thermal", 0x80: "hw-power-brake",
           0x100: "display-clocks"}


def parse(path):
    samples, marks = [], []
    for line in open(path):
        parts = [x.strip() for x in line.split(",")]
        if parts[0] == "mark" and len(parts) >= 3:
            marks.append((parts[1], parts[2]))
            continue
        if len(parts) < 5:
            continue
        try:
            stamp = parts[0].split(".")
            t = calendar.timegm(time.strptime(stamp[0], "%Y/%m/%d %H:%M:%S"))
            t += float("0." + stamp[1]) if len(stamp) > 1 else 0.0
            samples.append((t, float(parts[1]), float(parts[2]), float(parts[3]), int(parts[4], 16)))
        except ValueError:
            continue
    return samples, marks


def reasons(mask):
    names = [name for bit, name in REASONS.items() if mask & bit and bit != 0x1]
    return "+".join(names) or "-"


def describe(rows):
    clocks = [r[1] for r in rows]
    mask = 0
    for r in rows:
        mask |= r[4]
    return (f"SM clock median {statistics.median(clocks):.0f} min {min(clocks):.0f} MHz, "
            f"power max {max(r[2] for r in rows):.0f} W, temp max {max(r[3] for r in rows):.0f} C, "
            f"throttle {reasons(mask)}")


def main():
    samples, marks = parse(sys.argv[1])
    if not samples:
        print("-- clocks: no samples (nvidia-smi log empty)")
        return
    day = time.strftime("%Y/%m/%d", time.gmtime(samples[0][0]))
    bounds = [(calendar.timegm(time.strptime(f"{day} {hms}", "%Y/%m/%d %H:%M:%S")), name)
              for hms, name in marks]
    bounds.append((float("inf"), None))
    print("-- clocks per stage (nvidia-smi every 200 ms):")
    for (start, name), (end, _) in zip(bounds, bounds[1:]):
        rows = [r for r in samples if start <= r[0] < end and r[1] > 0]
        if rows and (name.startswith("ab_") or name in ("bench", "bench_bwd", "test", "sanitize")):
            print(f"   {name:10s} {describe(rows)}")


if __name__ == "__main__":
    main()
