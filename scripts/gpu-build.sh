# shellcheck shell=bash
# Sourced by scripts/gpu-check.sh and scripts/gpu-bench.sh: gpu_build SRC BUILD DATA TARGET...
# configures BUILD against the LibTorch inside python3's torch (a pip torch carries its LibTorch,
# CUDA and NCCL) and builds the targets named; a target that fails leaves the others built.
#
# The build needs dlrun's other dependencies (scripts/install-deps.sh's -dev packages). On a
# machine that has no apt archive to install them from:
# DEPS_DEBS: a folder of .deb files of them (scripts/gpu-pack.sh fetches them: `apt-get download` of
#   libfmt-dev libfmt9 libcli11-dev libtomlplusplus-dev libtomlplusplus3 libboost1.74-dev
#   libsqlite3-dev libsqlite3-0 nlohmann-json3-dev libnlopt-dev libnlopt0 zlib1g-dev zlib1g
#   libgloo-dev doctest-dev): unpacked into BUILD/deps, which is searched first.
# DEPS_PREFIX: a prefix that holds them already.
gpu_build() {
  local src=$1 build=$2 data=$3
  shift 3
  local torch_prefix deps=${DEPS_PREFIX:-}
  torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
  if [[ -n "${DEPS_DEBS:-}" ]]; then
    deps=$build/deps
    mkdir -p "$deps"
    for deb in "$DEPS_DEBS"/*.deb; do dpkg-deb -x "$deb" "$deps"; done
    # A package's absolute links (libz.so -> /lib/...) point into the unpacked tree instead.
    find "$deps" -type l -lname '/*' | while read -r link; do
      ln -sfn "$deps$(readlink "$link")" "$link"
    done
    deps=$deps/usr
  fi
  local arch
  arch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDLRUN_BUILD_TESTS="${BUILD_TESTS:-ON}" \
        -DCMAKE_PREFIX_PATH="$torch_prefix${deps:+;$deps}" \
        ${deps:+-DCMAKE_INCLUDE_PATH="$deps/include" -DCMAKE_LIBRARY_PATH="$deps/lib/$arch;$deps/lib"} \
        -DDLRUN_FASHION_MNIST_DIR="$data" -Wno-dev | grep -E "NCCL|Torch|CUDA|Python|pybind11" || true
  cmake --build "$build" --target "$@" -- -k 0
}
