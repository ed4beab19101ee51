# syntax=docker/dockerfile:1
# The Stead operator image: Stead in a virtual environment (/opt/stead), entrypoint `stead`, run
# as the numeric non-root user 65532:65532.
#
#   docker build -t ghcr.io/stead-dev/stead:0.1.0 .         (where a registry is reachable)
#   make image                                              (here: buildah, a local Debian base)
#
# BASE_IMAGE is any Debian-like image with python3 (3.11+, with its venv module), useradd and
# groupadd: python:3.11-slim by default; `make image` (scripts/build-image.sh) passes a local
# Debian bookworm base made with mmdebstrap when no registry is reachable. Debian's own python is
# "externally managed" (PEP 668), hence the virtual environment.
#
# The Helm chart (charts/stead) passes the command and its flags (`run`, mounted webhook
# certificates, health and webhook ports on all interfaces, the store on its volume); the root
# filesystem is read-only there: only the store, /tmp and the certificates are mounted.
# tests/e2e/test_image.py builds this image and runs it that way, with the chart's own arguments.

ARG BASE_IMAGE=docker.io/library/python:3.11-slim

# --- builder: a virtual environment with Stead and its dependencies -------------------------------
FROM ${BASE_IMAGE} AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

RUN python3 -m venv /opt/stead

WORKDIR /src
# Only what the package is built from (.dockerignore keeps the rest out of the context).
# README.m[d]: copied when present (pyproject names it; the build only warns without it).
COPY pyproject.toml README.m[d] ./
COPY operators ./operators
COPY pipelines ./pipelines
# Not editable: the venv holds a copy of the package and nothing points back at /src. pip and
# setuptools are removed (nothing installs at run time), and every module is compiled once with
# unchecked-hash .pyc files: the root filesystem is read-only, so Python could not cache them there.
# /run/build-ca/ca-certificates.crt: the build host's CA bundle when the builder mounts one
# (scripts/build-image.sh does, for networks whose proxy has its own CA); used for this step only,
# never copied into the image.
RUN if [ -f /run/build-ca/ca-certificates.crt ]; then export PIP_CERT=/run/build-ca/ca-certificates.crt; fi \
 && /opt/stead/bin/pip install --no-compile . \
 && /opt/stead/bin/pip uninstall --yes pip setuptools \
 && /opt/stead/bin/python -m compileall -q -j 0 --invalidation-mode unchecked-hash /opt/stead/lib

# --- runtime ---------------------------------------------------------------------------------------
FROM ${BASE_IMAGE} AS runtime

ARG BASE_IMAGE
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="stead" \
      org.opencontainers.image.description="Stead: Kubernetes operators for the lifecycle of applications, services, configuration and deployment graphs" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"

ENV PATH=/opt/stead/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    STEAD_HOME=/var/lib/stead \
    HOME=/var/lib/stead

# The chart's volumes are mounted on these: the store (writable by 65532, also without a volume)
# and the webhook certificates.
RUN groupadd --system --gid 65532 stead \
 && useradd --system --uid 65532 --gid 65532 --home-dir /var/lib/stead --no-create-home \
            --shell /usr/sbin/nologin stead \
 && mkdir -p /var/lib/stead/store /etc/stead/webhook \
 && chown -R 65532:65532 /var/lib/stead

COPY --from=builder /opt/stead /opt/stead

WORKDIR /var/lib/stead
# Numeric, so that Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 65532:65532

# 9443: admission webhook (HTTPS); 8443: the configuration API (HTTPS); 8080: /healthz, /readyz
# and /metrics.
EXPOSE 9443 8443 8080

# `docker run IMAGE` runs the operator; `docker run IMAGE --version`, `... crds --dir DIR`, etc.
# run the other commands. The chart gives the command (`operator`) in its args.
ENTRYPOINT ["/opt/stead/bin/stead"]
CMD ["operator"]
