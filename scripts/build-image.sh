#!/bin/sh
# Build Stead's image from ./Dockerfile without Docker: buildah (vfs storage, chroot isolation).
#
#   scripts/build-image.sh tools          install buildah and mmdebstrap (apt-get) when missing
#   scripts/build-image.sh base           make the local Debian base image (cached), print its name
#   scripts/build-image.sh build [TAG]    both, then build TAG (default: $STEAD_IMAGE or localhost/stead:dev)
#
# Where no registry is reachable the base is a Debian bookworm root filesystem made with
# mmdebstrap from Debian's packages (python3, python3-venv, ca-certificates). Its tarball is cached
# in ${STEAD_CACHE:-~/.cache/stead}/image, and the committed base image stays in buildah's storage,
# both under a key made of everything that goes into them (BASE_REVISION, suite, architecture,
# mmdebstrap's arguments): the second build skips mmdebstrap and the import. Bump BASE_REVISION to
# take Debian's updates. Stead's own layers are never cached: every build installs it afresh.
#
# With STEAD_BASE_IMAGE set (e.g. docker.io/library/python:3.11-slim where a registry is reachable)
# that image is the base and mmdebstrap is not used.
#
# Needs root (buildah's storage in /var/lib/containers, mmdebstrap's root mode).

set -eu

BASE_REVISION=1
SUITE=bookworm
PACKAGES=python3,python3-venv,ca-certificates
# No manuals, translations or documentation but the copyrights (as Debian's slim images).
MMDEBSTRAP_ARGS="--variant=minbase --include=$PACKAGES --format=tar
 --dpkgopt=path-exclude=/usr/share/man/* --dpkgopt=path-exclude=/usr/share/locale/*
 --dpkgopt=path-exclude=/usr/share/info/* --dpkgopt=path-exclude=/usr/share/doc/*
 --dpkgopt=path-include=/usr/share/doc/*/copyright"
# The environment of `buildah from scratch` is empty: give the base what Debian's images have.
BASE_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

buildah() { command buildah --storage-driver vfs "$@"; }
say() { printf 'build-image: %s\n' "$*" >&2; }

cd "$(dirname "$0")/.."

need_root() {
    if [ "$(id -u)" != 0 ]; then
        say "needs root (buildah's vfs storage, mmdebstrap); run it as root"
        exit 1
    fi
}

tools() {
    if command -v buildah >/dev/null && command -v mmdebstrap >/dev/null; then
        return
    fi
    if [ "$(id -u)" != 0 ]; then
        say "buildah or mmdebstrap missing: as root, this installs them (the image test is skipped meanwhile)"
        return
    fi
    say "installing buildah and mmdebstrap (apt-get)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah mmdebstrap >/dev/null
}

base() {
    arch=$(dpkg --print-architecture)
    key=$(printf '%s\n' "$BASE_REVISION" "$SUITE" "$arch" "$MMDEBSTRAP_ARGS" "$BASE_PATH" \
          | sha256sum | cut -c1-12)
    image=localhost/stead-base:$SUITE-$key
    if buildah inspect --type image "$image" >/dev/null 2>&1; then
        echo "$image"
        return
    fi
    cache=${STEAD_CACHE:-$HOME/.cache/stead}/image
    tarball=$cache/debian-$SUITE-$arch-$key.tar
    mkdir -p "$cache"
    if [ ! -f "$tarball" ]; then
        say "making the Debian $SUITE base with mmdebstrap (cached in $tarball)"
        # Other keys' tarballs are stale by definition.
        find "$cache" -maxdepth 1 -name "debian-*.tar" ! -name "$(basename "$tarball")" -delete
        # shellcheck disable=SC2086 # the arguments are words
        mmdebstrap --quiet $MMDEBSTRAP_ARGS "$SUITE" "$tarball.$$.tmp"
        mv "$tarball.$$.tmp" "$tarball"
    fi
    say "importing $tarball as $image"
    ctr=$(buildah from scratch)
    trap 'buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
    tar -C "$(buildah mount "$ctr")" -xf "$tarball"
    buildah config --env PATH=$BASE_PATH --env LANG=C.UTF-8 --cmd /bin/sh --os linux --arch "$arch" \
        --label org.opencontainers.image.description="Debian $SUITE ($PACKAGES), mmdebstrap" "$ctr"
    buildah commit --quiet --rm "$ctr" "$image" >/dev/null
    trap - EXIT
    echo "$image"
}

build() {
    tag=${1:-${STEAD_IMAGE:-localhost/stead:dev}}
    need_root
    tools
    base_image=${STEAD_BASE_IMAGE:-$(base)}
    version=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml)
    revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
    if ! git diff --quiet HEAD -- 2>/dev/null; then revision=$revision-dirty; fi
    previous=$(buildah inspect --type image --format '{{.FromImageID}}' "$tag" 2>/dev/null || true)
    # pip in the build trusts what this host trusts (a proxy's CA, say): the bundle is mounted for
    # the RUN steps only (see the Dockerfile), never copied into a layer.
    set --
    ca=${STEAD_BUILD_CA:-${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}}
    if [ -f "$ca" ]; then set -- --volume "$ca:/run/build-ca/ca-certificates.crt:ro"; fi
    say "building $tag from $base_image"
    buildah bud --isolation chroot --pull=false --layers=false "$@" \
        --build-arg BASE_IMAGE="$base_image" --build-arg VERSION="$version" --build-arg REVISION="$revision" \
        --tag "$tag" --file Dockerfile .
    # The image TAG named before is now untagged: remove it (vfs keeps a full copy of each layer).
    current=$(buildah inspect --type image --format '{{.FromImageID}}' "$tag")
    if [ -n "$previous" ] && [ "$previous" != "$current" ]; then
        buildah rmi "$previous" >/dev/null 2>&1 || true
    fi
    say "built $tag ($(buildah images --format '{{.Size}}' --filter id="$current" | head -n1))"
}

case "${1:-build}" in
    tools) tools ;;
    base) need_root; tools; base ;;
    build) shift 2>/dev/null || true; build "$@" ;;
    *) say "usage: $0 [tools | base | build [TAG]]"; exit 2 ;;
esac
