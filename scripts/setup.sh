#!/usr/bin/env bash
# lintrain set-up: install missing system packages (Debian), configure and build (Release).
#
#   bash scripts/setup.sh                 install what is missing, build into build/
#   bash scripts/setup.sh --test          ... then run the test suite (ctest)
#   bash scripts/setup.sh --sanitize --test   CPU-only ASan+UBSan build in build-asan/, then its tests
#   bash scripts/setup.sh --bench         ... then run the benchmark suite (scripts/bench.sh)
#   bash scripts/setup.sh --train         ... then train configs/quick.json (CUDA if present, else CPU)
#
# Idempotent: packages already installed are not touched; an existing build is reused.
# Packages come from Debian only (plus the CUDA toolkit when present: nvcc on PATH or in
# /usr/local/cuda/bin enables the CUDA backend; without it the CPU backend is built).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

run_tests=0; sanitize=0; bench=0; train=0; jobs=$(nproc 2>/dev/null || echo 2)
for arg in "$@"; do
  case "$arg" in
    --test) run_tests=1 ;;
    --sanitize) sanitize=1 ;;
    --bench) bench=1 ;;
    --train) train=1 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

packages=(cmake ninja-build g++ libcli11-dev libspdlog-dev nlohmann-json3-dev catch2 python3 clang-format clang-tidy)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: system packages present"
fi

# nvcc is often installed outside PATH by the CUDA toolkit.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

if [ $sanitize -eq 1 ]; then
  build=build-asan
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLINTRAIN_SANITIZE=ON
else
  build=build
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
if [ $sanitize -eq 1 ]; then
  # the tests and what they run (the trainer); kbench is not run under the sanitizers
  cmake --build "$build" -j "$jobs" --target lintrain_tests
else
  cmake --build "$build" -j "$jobs"
fi

if [ $run_tests -eq 1 ]; then
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  ctest --test-dir "$build" --output-on-failure -j "$jobs"
fi
if [ $bench -eq 1 ]; then
  bash scripts/bench.sh "$build"
fi
if [ $train -eq 1 ]; then
  "$build/apps/trainer" --config configs/quick.json
fi
