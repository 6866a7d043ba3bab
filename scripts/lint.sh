#!/usr/bin/env bash
# Formatting and static analysis, a stage of scripts/test.sh (and so of CI). Fails on a formatting
# difference or a clang-tidy finding.
#   scripts/lint.sh           both checks (clang-tidy needs build/compile_commands.json, which
#                             `cmake --preset default` writes)
#   scripts/lint.sh format    clang-format only: lists the files that differ, changes nothing
#   scripts/lint.sh tidy      clang-tidy only (.clang-tidy; run-clang-tidy on all cores)
#   scripts/lint.sh fix-format  rewrites the covered files in place
# Both tools are pinned to version 14 (Debian 12's): another clang-format formats differently.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-all}

# Paths clang-format does not check: generated code (scripts/gpu/gen_wgmma.py writes the
# wgmma wrappers, one asm statement per shape on lines far past the column limit).
format_excluded=(src/cuda/sm90/wgmma.cuh)

# Sources clang-tidy reads (with the headers .clang-tidy's HeaderFilterRegex names); tests,
# benchmarks and fuzz targets are not analysed.
tidy_sources='^(src/(api|cpu|reference)|tools)/.*\.cpp$'

format_files() {
  local exclude=()
  for dir in "${format_excluded[@]}"; do exclude+=(":(exclude)$dir"); done
  git ls-files -z -- '*.cpp' '*.hpp' '*.h' '*.cc' '*.inl' '*.cu' '*.cuh' "${exclude[@]}"
}

check_format() {
  echo "== clang-format (outside: ${format_excluded[*]})"
  local start=$SECONDS list
  list=$(mktemp)
  format_files | xargs -0 clang-format-14 --dry-run -Werror 2>"$list" || true
  if [ -s "$list" ]; then
    # One line per file (the full diagnostics would repeat every changed line).
    grep -oE '^[^:]+:[0-9]+:[0-9]+: (error|warning)' "$list" | cut -d: -f1 | sort -u |
      sed 's/^/  not formatted: /' | grep . || cat "$list"
    echo "clang-format: run scripts/lint.sh fix-format and commit the result"
    rm -f "$list"
    return 1
  fi
  rm -f "$list"
  echo "clang-format: clean ($((SECONDS - start)) s)"
}

check_tidy() {
  echo "== clang-tidy"
  [ -f build/compile_commands.json ] || { echo "no build/compile_commands.json: run cmake --preset default"; return 1; }
  local start=$SECONDS log sources=()
  # run-clang-tidy takes regular expressions matched against the compile commands' paths.
  mapfile -t sources < <(git ls-files | grep -E "$tidy_sources" | sed 's/\./\\./g; s#^#/#; s#$#$#')
  log=$(mktemp)
  # The compile commands are GCC's: clang does not know -Wno-maybe-uninitialized, and it reports
  # the compound literal inside its own _cvtss_sh macro (f16cintrin.h) under -Wpedantic.
  if run-clang-tidy-14 -quiet -j "$(nproc)" -p build \
      -extra-arg=-Wno-unknown-warning-option -extra-arg=-Wno-c99-extensions \
      "${sources[@]}" >"$log" 2>&1; then
    echo "clang-tidy: clean, ${#sources[@]} sources ($((SECONDS - start)) s)"
    rm -f "$log"
  else
    # run-clang-tidy colours its output and repeats a header's findings once per source.
    sed -E 's/\x1b\[[0-9;]*m//g' "$log" | grep -E '(warning|error):' | sort -u | grep . ||
      sed -E 's/\x1b\[[0-9;]*m//g' "$log" | tail -n 40
    echo "clang-tidy: findings above (fix them; a NOLINT(check) needs a comment saying why)"
    rm -f "$log"
    return 1
  fi
}

case "$mode" in
  all)
    status=0
    check_format || status=1
    check_tidy || status=1
    exit "$status"
    ;;
  format) check_format ;;
  tidy) check_tidy ;;
  fix-format) format_files | xargs -0 clang-format-14 -i ;;
  *) echo "usage: scripts/lint.sh [all|format|tidy|fix-format]" >&2; exit 2 ;;
esac
