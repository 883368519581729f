#!/usr/bin/env bash
# Apply the tree's C++/CUDA format (.clang-format) to every tracked source file, or check it.
#
#   bash scripts/format.sh            rewrite the files in place
#   bash scripts/format.sh --check    change nothing; list the files that differ, exit 1 if any
#   bash scripts/format.sh [--check] FILE...   only these files
#
# Files: the git-tracked *.h, *.cpp, *.cu, *.cuh under allocator/ kernels/ engine/ apps/ tests/.
# The binary: $CLANG_FORMAT, else clang-format-14, else clang-format (the config is written for
# version 14, Debian bookworm's; another major version may format a few constructs differently,
# so the check says which version it ran).
set -euo pipefail
cd "$(dirname "$0")/.."

check=0
files=()
for arg in "$@"; do
  case "$arg" in
    --check) check=1 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "format.sh: unknown option '$arg' (see --help)" >&2; exit 2 ;;
    *) files+=("$arg") ;;
  esac
done

cf=${CLANG_FORMAT:-}
if [ -z "$cf" ]; then
  for c in clang-format-14 clang-format; do
    if command -v "$c" >/dev/null 2>&1; then cf=$c; break; fi
  done
fi
if [ -z "$cf" ]; then
  echo "format.sh: clang-format not found (Debian: apt-get install clang-format; or set CLANG_FORMAT)" >&2
  exit 2
fi

if [ ${#files[@]} -eq 0 ]; then
  mapfile -t files < <(git ls-files -- 'allocator/*.h' 'allocator/*.cpp' 'kernels/*.h' 'kernels/*.cpp' \
    'kernels/*.cu' 'kernels/*.cuh' 'engine/*.h' 'engine/*.cpp' 'apps/*.h' 'apps/*.cpp' 'apps/*.cu' \
    'tests/*.h' 'tests/*.cpp' 'tests/*.cu' 'tests/*.cuh')
fi

if [ $check -eq 0 ]; then
  "$cf" -i --style=file "${files[@]}"
  echo "format.sh: formatted ${#files[@]} files with $("$cf" --version | sed 's/.*version /version /')"
  exit 0
fi

bad=()
for f in "${files[@]}"; do
  if ! "$cf" --style=file "$f" | cmp -s - "$f"; then bad+=("$f"); fi
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "format.sh --check: ${#bad[@]} of ${#files[@]} files differ from .clang-format" \
    "($("$cf" --version | sed 's/.*version /version /')); run bash scripts/format.sh:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "format.sh --check: ${#files[@]} files match .clang-format"
