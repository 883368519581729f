#!/usr/bin/env bash
# Build lintrain on the GPU machine (Release, CUDA on) and report the build's times. The
# machine has nvcc, cmake and ninja but not the Debian packages the build needs: a tarball of
# them (made on the development machine, see below) is unpacked under /opt/lintrain-deps.
#
#   bash scripts/device/build_on_device.sh DEPS_TGZ BUILD_DIR OUT [JOBS]
#
# DEPS_TGZ  the files of libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev catch2 and
#           their shared libraries, as absolute paths, e.g. made with
#             tar czf deps.tgz $(dpkg -L libcli11-dev libspdlog-dev libfmt-dev \
#               nlohmann-json3-dev catch2 libspdlog1.10 libfmt9 | xargs -d '\n' -I{} \
#               sh -c '[ -f "{}" ] && echo "{}"')
# OUT       build.log, build_times.txt (scripts/build_times.sh), ninja_log
# JOBS      parallel compile jobs (default: the core count)
set -euo pipefail
deps=${1:?deps tarball}; build=${2:?build dir}; out=${3:?out}; jobs=${4:-$(nproc)}
mkdir -p "$out" /opt/lintrain-deps
tar xzf "$deps" -C /opt/lintrain-deps
prefix=/opt/lintrain-deps/usr
export LD_LIBRARY_PATH="$prefix/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix;$prefix/lib/x86_64-linux-gnu/cmake;$prefix/share/cmake;$prefix/lib/cmake" \
  -DCMAKE_CXX_FLAGS="-isystem $prefix/include" -DCMAKE_CUDA_FLAGS="-isystem=$prefix/include" \
  > "$out/build.log" 2>&1
start=$(date +%s.%N)
cmake --build "$build" -j "$jobs" >> "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
end=$(date +%s.%N)
printf 'clean build: %.1f s wall with -j %s on %s cores (%s)\n' "$(awk -v a="$start" -v b="$end" 'BEGIN{print b-a}')" "$jobs" "$(nproc)" \
  "$(date -u +%FT%TZ)" | tee "$out/build_times.txt"
bash scripts/build_times.sh "$build" --top 10 | tee -a "$out/build_times.txt"
cp "$build/.ninja_log" "$out/ninja_log"
