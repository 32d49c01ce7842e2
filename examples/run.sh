#!/usr/bin/env bash
# examples/run.sh: the main job in one command. Installs the Debian packages that are missing
# (--no-install-recommends), configures build/ in Release (the same folder and configure line
# as tests/run.sh, cmake/setup.sh, so the two commands compile the library once; ccache when
# present; the CUDA backend builds when nvcc is found), builds the fashion_mnist trainer and
# runs it with your arguments, e.g.
#   examples/run.sh                       # SmallCNN, 5 epochs, outputs in runs/fashion_mnist
#   examples/run.sh --model mlp --epochs 10 --out runs/mlp
#   examples/run.sh --resume              # continue an interrupted run
# BUILD_DIR and JOBS override the build folder and parallelism. Not the tests (tests/run.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
source cmake/setup.sh

brisk_install "${BRISK_PACKAGES[@]}"
BUILD="${BUILD_DIR:-$ROOT/build}"
echo "== build fashion_mnist in ${BUILD#"$ROOT"/} (log ${BUILD#"$ROOT"/}/build.log)" >&2
brisk_configure_release "$BUILD"
brisk_build "$BUILD" fashion_mnist
# libgomp's default active spin-waiting made 2-thread training up to 40x slower on the shared,
# loaded 2-vCPU build machines (a descheduled thread stalls every barrier); passive waiting is
# the measured choice there. Export OMP_WAIT_POLICY=active to override on a quiet machine.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
exec "$BUILD/examples/fashion_mnist" "$@"
