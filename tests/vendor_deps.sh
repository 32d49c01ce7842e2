#!/usr/bin/env bash
# tests/vendor_deps.sh: copies the header-only dependencies (Eigen, doctest, nlohmann-json) and
# their CMake package files, plus zlib (headers and the static libz.a, which brisk's IDX reader
# links), from this machine's system folders into third_party/ (git-ignored), laid out as an
# install prefix. A machine without apt or internet (the GPU machine) then
# configures with -DCMAKE_PREFIX_PATH=$PWD/third_party (tests/gpu.sh does it by itself).
# Run it where the Debian packages are installed (libeigen3-dev doctest-dev nlohmann-json3-dev).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-third_party}
need() { [ -e "$1" ] || { echo "tests/vendor_deps.sh: $1 is missing (install $2)" >&2; exit 1; }; }
need /usr/include/eigen3/Eigen/Core libeigen3-dev
need /usr/include/doctest/doctest.h doctest-dev
need /usr/include/nlohmann/json.hpp nlohmann-json3-dev
need /usr/share/eigen3/cmake/Eigen3Config.cmake libeigen3-dev
need /usr/lib/cmake/doctest/doctestConfig.cmake doctest-dev
need /usr/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake nlohmann-json3-dev
ZLIB_A=$(ls /usr/lib/*/libz.a /usr/lib/libz.a 2>/dev/null | head -1 || true)
need "${ZLIB_A:-/usr/lib/libz.a}" zlib1g-dev
need /usr/include/zlib.h zlib1g-dev

rm -rf "$OUT"
mkdir -p "$OUT/include" "$OUT/share/eigen3" "$OUT/lib/cmake" "$OUT/share/cmake"
cp -r /usr/include/eigen3 "$OUT/include/"
cp -r /usr/include/doctest "$OUT/include/"
cp -r /usr/include/nlohmann "$OUT/include/"
cp -r /usr/share/eigen3/cmake "$OUT/share/eigen3/"
cp -r /usr/lib/cmake/doctest "$OUT/lib/cmake/"
cp -r /usr/share/cmake/nlohmann_json "$OUT/share/cmake/"
cp /usr/include/zlib.h /usr/include/zconf.h "$OUT/include/"
cp "$ZLIB_A" "$OUT/lib/"
# Debian's doctest targets file hard-codes /usr: make it relative to its own location
# (lib/cmake/doctest -> three levels up), as the Eigen and nlohmann files already are.
sed -i 's|^set(_IMPORT_PREFIX "/usr")|get_filename_component(_IMPORT_PREFIX "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)|' \
  "$OUT/lib/cmake/doctest/doctestTargets.cmake"
grep -q 'CMAKE_CURRENT_LIST_DIR}/../../..' "$OUT/lib/cmake/doctest/doctestTargets.cmake" || {
  echo "tests/vendor_deps.sh: could not relocate doctestTargets.cmake" >&2; exit 1; }
echo "tests/vendor_deps.sh: $(du -sh "$OUT" | cut -f1) in $OUT (Eigen, doctest, nlohmann-json, zlib + CMake files)"
