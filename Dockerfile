# Dockerfile: the main job (examples/run.sh, the fashion_mnist trainer) in a Debian 12 image
# that has the packages of examples/run.sh and tests/run.sh (cmake/setup.sh's BRISK_PACKAGES
# and BRISK_TEST_PACKAGES), with the library and the trainer already built in build/, the
# Release folder both commands use. Its default command is the main job; docs/container.md has
# the details and what was verified, tests/container.sh lints this file, checks its package
# list against cmake/setup.sh and (--build) builds the image and runs the job inside.
#
#   docker build -t brisk .                   (or podman build / buildah bud)
#   docker run --rm brisk                     the main job: SmallCNN, 5 epochs, runs/fashion_mnist
#   docker run --rm brisk examples/run.sh --epochs 1 --model mlp     options of the trainer
#   docker run --rm -v "$PWD/runs:/brisk/runs" brisk                 keep the outputs (runs/
#                                             must be writable by uid 1000, the image's user)
#
# Build arguments (--build-arg NAME=VALUE):
#   BASE=debian:12       the base image (tests/container.sh passes one made with debootstrap)
#   WITH_CUDA=0          1: also NVIDIA's CUDA toolkit (its apt repository; CUDA 13, since the
#                        CUDA backend needs nvcc's -std=c++20, which Debian 12's own
#                        nvidia-cuda-toolkit 11.8 lacks) and the CUDA backend is built
#   CUDA_PACKAGES=...    what WITH_CUDA=1 installs from that repository
#   BRISK_NATIVE=OFF     ON: -march=native, only for an image run on the CPU it was built on
#   JOBS=                build parallelism (default: all cores)
ARG BASE=debian:12
FROM ${BASE}

ARG WITH_CUDA=0
ARG CUDA_PACKAGES="cuda-nvcc-13-0 cuda-cudart-dev-13-0 libcublas-dev-13-0"
ARG BRISK_NATIVE=OFF
ARG JOBS=

# One apt layer: BRISK_PACKAGES and BRISK_TEST_PACKAGES of cmake/setup.sh (the main job's, the
# tests', the sanitizer and fuzz builds'), then with WITH_CUDA=1 NVIDIA's repository and
# toolkit; the lists are removed in the same layer.
# Not pinned (DL3008): Debian 12's point releases replace the versions in the archive, so pins
# would break the build; the suite (bookworm) is the pin. $CUDA_PACKAGES is split into words
# on purpose. POSIX sh throughout: podman's default (OCI) image format ignores SHELL.
# hadolint ignore=DL3008
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      cmake ninja-build g++ ccache libeigen3-dev doctest-dev nlohmann-json3-dev zlib1g-dev libstb-dev \
      libjpeg-dev python3 python3-venv libopenmpi-dev openmpi-bin dataset-fashion-mnist \
      clang-format clang libclang-rt-dev libomp-dev \
 && if [ "$WITH_CUDA" = 1 ]; then \
      DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates curl \
      && curl -fsSL -o /tmp/cuda-keyring.deb \
           https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb \
      && dpkg -i /tmp/cuda-keyring.deb && rm /tmp/cuda-keyring.deb \
      && apt-get update \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $CUDA_PACKAGES; \
    fi \
 && rm -rf /var/lib/apt/lists/*

# NVIDIA's packages put nvcc in /usr/local/cuda/bin (absent otherwise: then CMake finds no nvcc).
ENV PATH=/usr/local/cuda/bin:${PATH}

# An unprivileged user, brisk (uid 1000), owns the tree: the job re-runs the configure and writes
# build/ and runs/ as it. Run it as that user (the default) or as root: CMake's configure_file
# cannot set the modes of files another uid owns, so other uids fail at the configure.
RUN useradd --create-home --uid 1000 --user-group --shell /bin/bash brisk \
 && install -d -o 1000 -g 1000 /brisk
WORKDIR /brisk
COPY --chown=1000:1000 . .
USER 1000:1000

# The library and the trainer, configured by cmake/setup.sh's brisk_configure_release exactly
# as examples/run.sh configures build/, so the job's own configure and build change nothing and
# it starts at once. That configure line leaves BRISK_NATIVE and BRISK_CUDA to the cache, which
# a first configure fills: BRISK_NATIVE OFF by default (an image is built on one CPU and run on
# others), BRISK_CUDA from WITH_CUDA (a WITH_CUDA=1 build without a working nvcc fails here
# rather than quietly building for the CPU only). No ccache in the image (CCACHE_DISABLE): a
# cache of one build would only make the layer larger.
RUN cuda=OFF; [ "$WITH_CUDA" = 1 ] && cuda=ON; \
    mkdir -p build \
 && cmake -S . -B build -G Ninja -DBRISK_NATIVE="$BRISK_NATIVE" -DBRISK_CUDA="$cuda" >build/seed.log \
 && CCACHE_DISABLE=1 bash -c 'ROOT=$PWD && . cmake/setup.sh && brisk_configure_release build' \
 && grep "^BRISK_NATIVE:\|^BRISK_CUDA:" build/CMakeCache.txt \
 && CCACHE_DISABLE=1 cmake --build build --target fashion_mnist -j "${JOBS:-$(nproc)}"

# The main job with its defaults (SmallCNN, 5 epochs, outputs in /brisk/runs/fashion_mnist);
# any other command line replaces it, e.g. `examples/run.sh --epochs 1` or `bash`.
CMD ["examples/run.sh"]
