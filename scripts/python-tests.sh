#!/usr/bin/env bash
# Builds the Python package and runs its tests on the CPU (python/tests). Called by
# scripts/test.sh (the README's test command); runs on its own too.
#   - a virtualenv under the build tree, build/python-venv (Debian's pip refuses system-wide
#     installs, PEP 668), with python/requirements-test.txt (pinned; pip's cache makes reruns
#     cheap);
#   - the package: `pip install .` without build isolation (scikit-build-core drives the
#     top-level CMake build in build/python/<wheel tag>, kept between runs, so a rerun
#     recompiles only what changed);
#   - pytest from outside the source tree's python/ folder, so the installed package is tested.
#   scripts/python-tests.sh prepare   only the virtualenv and its requirements (scripts/test.sh
#                                     runs this in the background while it builds the C++: the
#                                     requirements are mostly downloads)
# Environment: PYTHON (the interpreter for the virtualenv; default Debian's /usr/bin/python3),
# PYTEST_ARGS (extra pytest arguments).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-$(command -v /usr/bin/python3 || command -v python3)}
venv=build/python-venv
stamp() { date +%s; }

t0=$(stamp)
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r python/requirements-test.txt
t1=$(stamp)
if [ "${1:-}" = prepare ]; then
  echo "python: venv + requirements $((t1 - t0)) s"
  exit 0
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps .
t2=$(stamp)
"$venv/bin/python" -m pytest -q -p no:cacheprovider python/tests ${PYTEST_ARGS:-}
t3=$(stamp)
echo "python: venv + requirements $((t1 - t0)) s, package build $((t2 - t1)) s, tests $((t3 - t2)) s"
