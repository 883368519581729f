#!/usr/bin/env bash
# The slowest build steps (translation units, links) of a build folder, from its ninja log.
#
#   bash scripts/build_times.sh [BUILD_DIR] [--top N] [--max-seconds S]
#
# Each output's latest entry in BUILD_DIR/.ninja_log (default build/) counts: the time its
# last compile took. Prints the N slowest (default 10) with seconds, then the count and the
# sum of all. With --max-seconds S, exits 1 naming every step over S seconds (CI's guard).
set -euo pipefail
build=build; top=10; max=""
while [ $# -gt 0 ]; do
  case "$1" in
    --top) top=${2:?--top needs a number}; shift 2 ;;
    --max-seconds) max=${2:?--max-seconds needs a number}; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "build_times.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) build=$1; shift ;;
  esac
done
case "$top" in ''|*[!0-9]*) echo "build_times.sh: --top takes a whole number, got '$top'" >&2; exit 2 ;; esac
log="$build/.ninja_log"
if [ ! -f "$log" ]; then
  echo "build_times.sh: no ninja log at $log (build with -G Ninja first)" >&2
  exit 2
fi
# .ninja_log v5: start_ms end_ms mtime output hash, one line a step, appended per build.
awk -v top="$top" -v max="$max" '
  /^#/ { next }
  NF >= 4 { t[$4] = ($2 - $1) / 1000.0 }
  END {
    n = 0; sum = 0
    for (o in t) { n++; sum += t[o]; names[n] = o }
    # selection sort of the top entries (a few hundred outputs at most)
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (t[names[j]] > t[names[i]]) { x = names[i]; names[i] = names[j]; names[j] = x }
    printf "%10s  %s\n", "seconds", "build step (slowest first)"
    for (i = 1; i <= n && i <= top; i++) printf "%10.1f  %s\n", t[names[i]], names[i]
    printf "%d steps, %.0f s in all (CPU time summed over steps)\n", n, sum
    if (max != "") {
      bad = 0
      for (i = 1; i <= n; i++) if (t[names[i]] > max + 0) { printf "over %s s: %s (%.1f s)\n", max, names[i], t[names[i]]; bad++ }
      if (bad > 0) exit 1
    }
  }' "$log"
