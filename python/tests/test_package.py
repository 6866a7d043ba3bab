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
