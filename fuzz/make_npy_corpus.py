#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_npy (fuzz/corpus/npy/): small .npy files in numpy's own
layout (header dict padded with spaces to a multiple of 64 bytes, ending in a newline) for every
element type the reader supports, in format versions 1.0 and 2.0, plus malformed variants.
Needs only the Python standard library; run from anywhere, then commit the files."""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "npy")

TYPES = {  # descr: (struct code, sample values)
    "<f4": ("<f", [0.0, -1.5, 3.25, float("inf"), float("nan"), 1e-40]),
    "<f2": ("<e", [0.0, -1.5, 3.25, 65504.0, float("-inf"), 6e-8]),
    "|b1": ("<?", [True, False, True, True, False, False]),
    "<i4": ("<i", [0, -1, 2**31 - 1, -(2**31), 7, 42]),
    "<i8": ("<q", [0, -1, 2**63 - 1, -(2**63), 7, 42]),
}


def shape_literal(shape):
    if len(shape) == 1:
        return "(%d,)" % shape[0]
    return "(" + ", ".join(str(d) for d in shape) + ")"


def npy(descr, shape, payload, major=1, dict_text=None):
    text = dict_text or "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (
        descr, shape_literal(shape))
    prefix = 10 if major == 1 else 12
    text += " " * ((64 - (prefix + len(text) + 1) % 64) % 64) + "\n"
    length = struct.pack("<H", len(text)) if major == 1 else struct.pack("<I", len(text))
    return b"\x93NUMPY" + bytes([major, 0]) + length + text.encode("latin-1") + payload


def data(descr, count):
    code, samples = TYPES[descr]
    return b"".join(struct.pack(code, samples[i % len(samples)]) for i in range(count))


def main():
    os.makedirs(OUT, exist_ok=True)
    files = {}
    shapes = {"0d": (), "1d": (5,), "4d": (1, 2, 3, 2)}
    for descr in TYPES:
        for rank_name, shape in shapes.items():
            count = 1
            for d in shape:
                count *= d
            for major in (1, 2):
                name = "valid_%s_%s_v%d.npy" % (descr[1:], rank_name, major)
                files[name] = npy(descr, shape, data(descr, count), major)
    files["valid_f4_empty_v1.npy"] = npy("<f4", (3, 0), b"")
    files["valid_f4_v3.npy"] = npy("<f4", (2,), data("<f4", 2), 3)
    files["valid_key_order_v1.npy"] = npy(
        None, None, data("<f4", 6), 1, "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}")
    # Malformed: each one a single thing wrong.
    good = npy("<f4", (2, 3), data("<f4", 6))
    files["bad_magic.npy"] = b"\x93NUMPZ" + good[6:]
    files["bad_version_4.npy"] = good[:6] + b"\x04\x00" + good[8:]
    files["bad_truncated_header.npy"] = good[:40]
    files["bad_truncated_data.npy"] = good[:-5]
    files["bad_trailing_bytes.npy"] = good + b"\x00"
    files["bad_fortran_order.npy"] = npy(
        None, None, data("<f4", 6), 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }")
    files["bad_big_endian.npy"] = npy(">f4", (2, 3), data("<f4", 6))
    files["bad_f8.npy"] = npy("<f8", (2,), b"\x00" * 16)
    files["bad_negative_dim.npy"] = npy(
        None, None, b"", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 3), }")
    files["bad_huge_shape.npy"] = npy(
        None, None, b"", 1,
        "{'descr': '<i8', 'fortran_order': False, 'shape': (4611686018427387904, 4), }")
    files["bad_missing_key.npy"] = npy(None, None, b"", 1, "{'descr': '<f4', 'shape': (1,), }")
    files["bad_unterminated.npy"] = npy(None, None, b"", 1, "{'descr': '<f4, 'shape': (1,")
    files["bad_header_len.npy"] = good[:8] + b"\xff\xff" + good[10:]
    for name, content in files.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(content)
    print("wrote %d files to %s" % (len(files), OUT))


if __name__ == "__main__":
    main()
