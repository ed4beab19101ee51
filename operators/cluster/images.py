"""Container images for the local node without a registry: the Pod sandbox's ``pause``, packed here.

No registry is reachable (``registry.k8s.io/pause`` cannot be pulled), so the sandbox image is
built on the spot: a static Go program of a few lines, compiled once per source and cached beside
the other binaries, then packed as a one-layer OCI image archive that ``ctr images import``
takes. The archive is reproducible (entries sorted, owner root, mtime 0), so its digest only
changes with the program.

Images of the project itself are built by buildah (``make image``) and exported as OCI archives
by ``node.py``; nothing here talks to containerd.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from operators.cluster.atomicwrite import write_file_atomically
from operators.cluster.build import ControlPlaneError, Progress, cache_root, find_go

PAUSE_SOURCE: Final = """\
// pause: the sandbox container of a Pod. It holds the Pod's namespaces open, reaps the zombies of a
// shared PID namespace, and exits on SIGINT or SIGTERM. Built by Stead (no registry to pull from).
package main

import (
\t"os"
\t"os/signal"
\t"syscall"
)

func main() {
\tsignals := make(chan os.Signal, 8)
\tsignal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
\tfor s := range signals {
\t\tif s != syscall.SIGCHLD {
\t\t\tos.Exit(0)
\t\t}
\t\tfor {
\t\t\tvar status syscall.WaitStatus
\t\t\tpid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
\t\t\tif pid <= 0 || err != nil {
\t\t\t\tbreak
\t\t\t}
\t\t}
\t}
}
"""
PAUSE_DIGEST: Final = hashlib.sha256(PAUSE_SOURCE.encode()).hexdigest()[:12]
PAUSE_IMAGE: Final = f"stead.local/pause:{PAUSE_DIGEST}"
"""The sandbox image's name in containerd: changes with the program, never clashes with a pulled one."""
GO_BUILD_TIMEOUT_SECONDS: Final = 600.0


def pause_archive(root: Path | None = None, *, progress: Progress | None = None) -> Path:
    """The pause image as an OCI archive, built and cached when missing (a few seconds of ``go``)."""
    directory = (root or cache_root()) / f"pause-{PAUSE_DIGEST}"
    archive = directory / "pause.tar"
    if archive.exists():
        return archive
    if progress:
        progress("building the Pod sandbox image (pause) with go (only the first time)")
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="stead-pause-") as work:
        source = Path(work) / "src"
        source.mkdir()
        (source / "main.go").write_text(PAUSE_SOURCE)
        (source / "go.mod").write_text("module stead.dev/pause\n\ngo 1.24\n")
        rootfs = Path(work) / "rootfs"
        rootfs.mkdir()
        environment = {**os.environ, "CGO_ENABLED": "0", "GOWORK": "off", "GOFLAGS": "-buildvcs=false"}
        result = subprocess.run(
            [find_go(), "build", "-trimpath", "-ldflags", "-s -w", "-o", str(rootfs / "pause"), "."],
            cwd=source, env=environment, capture_output=True, text=True, timeout=GO_BUILD_TIMEOUT_SECONDS,
            check=False,
        )
        if result.returncode != 0:
            raise ControlPlaneError("building the pause image failed", result.stderr[-3000:])
        write_file_atomically(archive, oci_archive(PAUSE_IMAGE, rootfs, entrypoint=["/pause"]))
    return archive


def _layer(rootfs: Path) -> bytes:
    """The directory as an uncompressed tar layer: sorted, owned by root, mtime 0 (reproducible)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(rootfs.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(rootfs)))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            if info.isreg():
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
    return buffer.getvalue()


def _blob(data: bytes) -> tuple[str, bytes]:
    return "sha256:" + hashlib.sha256(data).hexdigest(), data


def oci_archive(
    name: str, rootfs: Path, *, entrypoint: Sequence[str] | None = None, cmd: Sequence[str] | None = None
) -> bytes:
    """A one-layer OCI image layout in a tar, named ``name`` (``io.containerd.image.name``)."""
    layer_digest, layer = _blob(_layer(rootfs))
    config_digest, config = _blob(json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                   "Entrypoint": list(entrypoint) if entrypoint else None,
                   "Cmd": list(cmd) if cmd else None, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }, sort_keys=True).encode())
    manifest_digest, manifest = _blob(json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest,
                   "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest,
                    "size": len(layer)}],
    }, sort_keys=True).encode())
    index = json.dumps({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest,
            "size": len(manifest), "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"io.containerd.image.name": name,
                            "org.opencontainers.image.ref.name": name.rpartition(":")[2]},
        }],
    }, sort_keys=True).encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        entries = [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", index)]
        entries += [(f"blobs/sha256/{digest.removeprefix('sha256:')}", data)
                    for digest, data in ((layer_digest, layer), (config_digest, config), (manifest_digest, manifest))]
        for entry, data in entries:
            info = tarfile.TarInfo(entry)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def image_base_name(reference: str) -> str:
    """``localhost/stead:dev`` → ``localhost/stead``: the name ``ctr import --base-name`` wants (a
    registry's port, ``host:5000/x``, is not a tag)."""
    name, colon, tag = reference.rpartition(":")
    return name if colon and "/" not in tag else reference
