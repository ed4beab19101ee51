# syntax=docker/dockerfile:1
# The Stead operator image: `stead run` on python:3.11-slim, as a non-root user.
#
#   docker build -t ghcr.io/stead-dev/stead:0.1.0 .
#
# The Helm chart (charts/stead) passes the flags that run it in a cluster (mounted webhook
# certificates, health and webhook ports on all interfaces, the store on its volume).

ARG PYTHON_VERSION=3.11

# --- builder: a wheel of Stead and of every dependency -------------------------------------------
FROM python:${PYTHON_VERSION}-slim AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
# Only what the wheel is built from (.dockerignore keeps the rest out of the context).
# README.m[d]: copied when present (pyproject names it; the build only warns without it).
COPY pyproject.toml README.m[d] ./
COPY operators ./operators
COPY pipelines ./pipelines
RUN pip wheel --wheel-dir /wheels .

# --- runtime ---------------------------------------------------------------------------------------
FROM python:${PYTHON_VERSION}-slim AS runtime

ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="stead" \
      org.opencontainers.image.description="Stead: Kubernetes operators for the lifecycle of applications, services, configuration and deployment graphs" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="docker.io/library/python:${PYTHON_VERSION}-slim"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    STEAD_HOME=/var/lib/stead \
    HOME=/var/lib/stead

# Installed offline from the builder's wheels, which are bind-mounted, never copied into a layer.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels stead \
 && groupadd --system --gid 65532 stead \
 && useradd --system --uid 65532 --gid 65532 --home-dir /var/lib/stead --no-create-home \
            --shell /usr/sbin/nologin stead \
 && mkdir -p /var/lib/stead/store /etc/stead/webhook \
 && chown -R 65532:65532 /var/lib/stead

WORKDIR /var/lib/stead
# Numeric, so that Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 65532:65532

# 9443: admission webhook (HTTPS); 8080: /healthz, /readyz and /metrics.
EXPOSE 9443 8080

ENTRYPOINT ["stead", "run"]
