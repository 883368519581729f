#!/usr/bin/env bash
# Check that a change to C++/CUDA sources touched comments only.
#
#   bash scripts/comment_only_diff.sh BASE_REV [FILE...]
#
# For each file (default: every *.h, *.cpp, *.cu, *.cuh that differs between BASE_REV and the
# work tree), the old text (git show BASE_REV:FILE) and the new one are stripped of comments by
# the compiler's own lexer (`g++ -fpreprocessed -dD -E -P -x c++`: comments removed, nothing
# included or expanded) and compared token by token (whitespace runs folded to one newline).
# Prints one line per file; exits 1 if any file's tokens differ, and shows the first differences.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
base=$1; shift
files=("$@")
[ ${#files[@]} -eq 0 ] && mapfile -t files < <(git diff --name-only "$base" -- '*.h' '*.cpp' '*.cu' '*.cuh')
strip() { g++ -fpreprocessed -dD -E -P -x c++ - 2>/dev/null | tr -s ' \t\n' '\n\n\n'; }
tmp=$(mktemp); trap 'rm -f "$tmp"' EXIT
bad=0
for f in "${files[@]}"; do
  if [ ! -e "$f" ] || ! git cat-file -e "$base:$f" 2>/dev/null; then
    echo "added or removed (not compared): $f"; bad=1; continue
  fi
  if diff <(git show "$base:$f" | strip) <(strip < "$f") > "$tmp"; then
    echo "comments only: $f"
  else
    echo "TOKENS DIFFER: $f"; head -20 "$tmp"; bad=1
  fi
done
exit $bad
