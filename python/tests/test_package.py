"""Packaging: the version's one source, python -m tileattn info, tileattn.Error, the stubs."""

import pathlib
import re
import subprocess
import sys

import pytest

import tileattn

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_version_is_cmake_project_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    version = re.search(r"project\(tileattn\s+VERSION\s+([0-9.]+)", text).group(1)
    assert tileattn.__version__ == version
    assert tileattn.build_info()["version"] == version
    from importlib.metadata import version as dist_version
    assert dist_version("tileattn") == version


def test_python_m_info_prints_build_report():
    done = subprocess.run([sys.executable, "-m", "tileattn", "info"], capture_output=True,
                          text=True, check=True)
    assert done.stdout == tileattn.build_report()
    lines = done.stdout.splitlines()
    assert lines[0] == f"tileattn {tileattn.__version__}"
    assert any(line.startswith("CPU ISA (best detected): ") for line in lines)
    assert lines[-1].startswith("CUDA") or lines[-1].startswith("  cuda:")


def test_python_m_info_matches_the_cli_where_built():
    cli = ROOT / "build" / "tools" / "tileattn"
    if not cli.exists():
        pytest.skip("the command-line tool is not built (cmake --preset default)")
    done = subprocess.run([str(cli), "info"], capture_output=True, text=True, check=True)
    built = done.stdout.splitlines()
    ours = tileattn.build_report().splitlines()
    backend = [l for l in built if l.startswith("CUDA backend:")]
    if backend != [l for l in ours if l.startswith("CUDA backend:")]:
        pytest.skip("the tool and the package were built with different CUDA settings")
    # The compiler line may differ when the two builds used different compilers; the rest not.
    assert [l for l in built if not l.startswith("compiler")] == \
        [l for l in ours if not l.startswith("compiler")]


def test_python_m_usage():
    done = subprocess.run([sys.executable, "-m", "tileattn", "nonsense"], capture_output=True,
                          text=True)
    assert done.returncode == 2 and "usage" in done.stderr


def test_error_is_a_value_error_with_the_message():
    assert issubclass(tileattn.Error, ValueError)
    assert tileattn.Error.__module__ == "tileattn"


def test_typed_package_ships_stubs():
    pkg = pathlib.Path(tileattn.__file__).parent
    assert (pkg / "py.typed").exists()
    assert (pkg / "_tileattn.pyi").exists()
    assert (pkg / "__init__.pyi").exists()


_FORMATS_NUMBERS = """
import numpy as np
import torch  # loads the process's libstdc++.so before the extension formats anything
import tileattn
q = np.zeros((1, 4, 2, 8), np.float32)
try:
    tileattn.attention(q, q, q, window=(-3, 0))
except tileattn.Error as e:
    print(e)
"""


def test_library_messages_format_numbers_beside_pytorch():
    # A fresh process, so that PyTorch's libstdc++ is loaded first: an extension carrying its own
    # exported libstdc++ formatted this message as "... got " (or crashed) there.
    done = subprocess.run([sys.executable, "-c", _FORMATS_NUMBERS], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("must be >= 0, or -1 for unbounded, got -3"), done.stdout
    if sys.platform.startswith("linux"):
        from tileattn import _tileattn
        # The extension exports no libstdc++ locale symbol of its own.
        exported = _exported_symbol_names(pathlib.Path(_tileattn.__file__).read_bytes())
        assert exported and not [n for n in exported if n.startswith(b"_ZNSt6locale")]


def _exported_symbol_names(elf: bytes) -> list:
    """The symbols the ELF (64-bit little-endian) defines in its dynamic symbol table."""
    import struct
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", elf, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind != 11:  # SHT_DYNSYM
            continue
        strtab = sections[link][4]
        names = []
        for at in range(offset, offset + size, entsize):
            name, _, _, shndx, _, _ = struct.unpack_from("<IBBHQQ", elf, at)
            if shndx != 0:  # defined here, not imported
                names.append(elf[strtab + name:elf.index(b"\0", strtab + name)])
        return names
    return []
