# Sourced (`. bench/runtime/setup.sh`) by bench/runtime.sh and bench/adaptive_overhead.sh:
# installs BUILD_DIR ($1, default build/) in a scratch prefix and builds bench/runtime/ against
# it with find_package(dlrun), as a user's project would (only $BENCH_TARGET when set). Sets
# src, build and work (removed at exit); the runs go to a DLRUN_HOME of their own, not into the
# user's job list.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$src/bench/runtime" -B "$work/bench" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/bench" ${BENCH_TARGET:+--target "$BENCH_TARGET"} >/dev/null
export DLRUN_LOG_LEVEL=warn DLRUN_HOME="$work/home"
