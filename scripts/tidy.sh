#!/usr/bin/env bash
# clang-tidy with .clang-tidy's checks over the tracked host C++ sources (*.cpp outside cuda/
# folders; the headers they include are checked through HeaderFilterRegex), two files at a
# time; any warning fails (exit 1). CUDA files are not analysed (.clang-tidy says why).
#
#   bash scripts/tidy.sh BUILD              every host source
#   bash scripts/tidy.sh BUILD FILE...      only these (the .cpp among them outside cuda/)
#
# BUILD: a configured CPU-only build folder (its compile_commands.json; configuring is enough,
# e.g. cmake -S . -B build-tidy -G Ninja -DLINTRAIN_ENABLE_CUDA=OFF). The binary: $CLANG_TIDY,
# else clang-tidy-14, else clang-tidy (Debian bookworm's is 14, the version .clang-tidy is
# written for).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: bash scripts/tidy.sh BUILD [FILE...]}
shift

ct=${CLANG_TIDY:-}
if [ -z "$ct" ]; then
  for c in clang-tidy-14 clang-tidy; do
    if command -v "$c" >/dev/null 2>&1; then ct=$c; break; fi
  done
fi
[ -n "$ct" ] || { echo "tidy.sh: clang-tidy not found (Debian: apt-get install clang-tidy)" >&2; exit 2; }
[ -f "$build/compile_commands.json" ] || { echo "tidy.sh: no $build/compile_commands.json (configure $build first)" >&2; exit 2; }

if [ $# -gt 0 ]; then
  files=$(printf '%s\n' "$@" | grep -E '^(allocator|kernels|engine|apps|tests)/.*\.cpp$' | grep -v '/cuda/' | grep -v '_cuda\.cpp$' || true)
else
  files=$(git ls-files 'allocator/*.cpp' 'kernels/*.cpp' 'engine/*.cpp' 'apps/*.cpp' 'tests/*.cpp' | grep -v '/cuda/' | grep -v '_cuda\.cpp$')
fi
# Only sources the CPU build compiles (a deleted or CUDA-only file has no entry).
files=$(for f in $files; do [ -f "$f" ] && echo "$f"; done)
if [ -z "$files" ]; then
  echo "tidy.sh: no host sources to check"
  exit 0
fi

# The build's precompiled headers are GCC's (.gch), which clang cannot read: the commands are
# copied without the "-include cmake_pch.hxx" that would make clang load them.
db=$(mktemp -d)
trap 'rm -rf "$db"' EXIT
sed -E 's# -Winvalid-pch -include [^ ]*cmake_pch\.hxx##g' "$build/compile_commands.json" >"$db/compile_commands.json"

n=$(echo "$files" | wc -l)
echo "tidy.sh: $ct over $n host sources, 2 at a time"
start=$(date +%s)
out="$db/out"
echo "$files" | xargs -P 2 -n 1 "$ct" -p "$db" --quiet --warnings-as-errors='*' >"$out" 2>&1 && rc=0 || rc=$?
grep -vE '^[0-9]+ warnings? (and [0-9]+ errors? )?generated\.$|^Suppressed [0-9]+ warnings|^Use -header-filter|^Use -system-headers' "$out" || true
echo "tidy.sh: $n sources in $(($(date +%s) - start)) s"
if [ $rc -ne 0 ]; then
  echo "tidy.sh: clang-tidy reported warnings (above); fix them or, with a one-line reason, change .clang-tidy" >&2
  exit 1
fi
