# syntax=docker/dockerfile:1
# The one hyperslice image: every role (`operator`, `webhook`, `device-plugin`, ...) is a
# subcommand of /usr/local/bin/hyperslice.
#
#   docker build -t <your-registry>/hyperslice:latest .
#   docker push <your-registry>/hyperslice:latest
# then set newName/newTag in deploy/kustomization.yaml (or image.* in the Helm chart).

# --- build: the Debian packages of scripts/deps.sh, a CMake + Ninja Release build -----------------
FROM debian:bookworm AS build
# deps.sh first, alone, so the package layer is reused when only sources change.
COPY scripts/deps.sh /src/scripts/deps.sh
RUN bash /src/scripts/deps.sh && rm -rf /var/lib/apt/lists/*
COPY . /src
# Tests and benchmarks are not part of the image (their packages are still installed: the top-level
# CMakeLists finds GTest and benchmark unconditionally).
RUN cmake -S /src -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DHS_SKIP="test;bench" \
 && ninja -C /build hyperslice \
 && strip /build/hyperslice \
 && /build/hyperslice --help >/dev/null

# --- runtime: only the shared libraries the binary loads, as a non-root user --------------------
FROM debian:bookworm-slim
# Runtime counterparts of the -dev packages hyperslice links: the packages of its NEEDED entries
# (`readelf -d`), whose dependencies bring the rest of `ldd`'s list (c-ares, re2, zlib, ...).
# libtss2-tcti-device0 is not NEEDED: the TCTI loader dlopens it for a sealed agent's /dev/tpmrm0.
# Boost is header-only here (Boost.JSON/URL are compiled into the binary).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates libssl3 libyaml-cpp0.7 libfmt9 libprotobuf32 libgrpc++1.51 libgrpc29 \
      libabsl20220623 libprometheus-cpp-core1.0 zlib1g libarchive13 \
      libtss2-esys-3.0.2-0 libtss2-mu0 libtss2-rc0 libtss2-sys1 libtss2-tctildr0 \
      libtss2-tcti-device0 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 hyperslice \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin hyperslice
COPY --from=build /build/hyperslice /usr/local/bin/hyperslice
# Fails the build when a shared library is missing.
RUN ["/usr/local/bin/hyperslice", "--help"]
# The device-plugin DaemonSet overrides this with runAsUser: 0 (it writes the kubelet's socket dir).
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/hyperslice"]
