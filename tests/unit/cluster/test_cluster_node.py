"""The local node's configuration, without starting it: what it would change on the machine, and
what it lets in. (Starting it for real: tests/e2e/test_node.py.)"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from operators.cluster.controlplane import LocalControlPlane
from operators.cluster.images import PAUSE_IMAGE, image_base_name, oci_archive
from operators.cluster.node import LocalNode, NodeStatus, missing_tools
from operators.cluster.nodeconfig import cni_config, containerd_config, kubelet_config
from operators.cluster.nodehost import NodeNetwork, containerd_argv


@pytest.fixture
def node(tmp_path: Path) -> LocalNode:
    return LocalNode(LocalControlPlane(tmp_path / "home"), network=NodeNetwork("steadu0", "10.77.0.0/16"))


def test_network_addresses() -> None:
    network = NodeNetwork("stead0", "10.88.0.0/16")
    assert (network.node_ip, network.first_pod_ip) == ("10.88.0.1", "10.88.0.10")
    assert network.rule_comment == "stead-node:stead0"


def test_the_kubelet_lets_no_one_in_anonymously(node: LocalNode) -> None:
    config = kubelet_config(node.socket, node.cgroup_root, node.network, node.plane.pki.client_ca_cert)
    assert config["authentication"] == {
        "anonymous": {"enabled": False}, "webhook": {"enabled": True},
        "x509": {"clientCAFile": str(node.plane.pki.client_ca_cert)},
    }
    assert config["authorization"] == {"mode": "Webhook"}
    assert config["readOnlyPort"] == 0
    # It listens on the node's bridge only, never on every address of the machine.
    assert config["address"] == config["healthzBindAddress"] == "10.77.0.1"
    assert config["cgroupRoot"] == node.cgroup_root == "/stead-steadu0"
    assert config["containerRuntimeEndpoint"] == f"unix://{node.socket}"


def test_pods_are_bridged_without_a_gateway_or_masquerading(node: LocalNode) -> None:
    """A gateway bridge would turn on ip_forward for the whole machine; masquerading would let Pod
    traffic out."""
    plugins: Any = cni_config(node.network, node.home / "cni" / "ipam")["plugins"]
    (plugin,) = plugins
    assert plugin["type"] == "bridge" and plugin["bridge"] == "steadu0"
    assert plugin["isGateway"] is False and plugin["ipMasq"] is False
    assert plugin["ipam"]["ranges"] == [[{"subnet": "10.77.0.0/16", "rangeStart": "10.77.0.10",
                                          "gateway": "10.77.0.1"}]]


def test_containerd_runs_in_a_mount_namespace_that_hides_iptables_and_kernel_settings(node: LocalNode) -> None:
    sysctl = node.home / "sysctl"
    sysctl.mkdir(parents=True)
    (sysctl / "vm.overcommit_memory").write_text("0\n")
    argv = containerd_argv(node.home)
    assert argv[:5] == ["unshare", "--mount", "--propagation", "private", "--"]
    script = argv[7]
    assert f'mount --bind "{sysctl / "vm.overcommit_memory"}" "/proc/sys/vm/overcommit_memory"' in script
    for target in ("/run", "/var/lib", "/var/log"):
        assert f'" "{target}"' in script
    if any(Path(d, "iptables").exists() for d in ("/usr/sbin", "/sbin")):
        assert "mount --bind /bin/false" in script
    assert script.rstrip().endswith('exec containerd --config "$0"')
    assert argv[8] == str(node.home / "etc" / "containerd.toml")


def test_containerd_config_keeps_everything_under_the_home(node: LocalNode) -> None:
    assert len(f"{node.socket}.ttrpc") <= 104  # a Unix socket's longest path, however long the home
    text = containerd_config(node.home, node.socket)
    assert f'sandbox_image = "{PAUSE_IMAGE}"' in text
    assert "restrict_oom_score_adj = true" in text
    for line in text.splitlines():
        if "= \"/" in line and "bin_dir" not in line:
            assert str(node.home) in line or str(node.socket) in line, line


def test_status_rows() -> None:
    assert NodeStatus("n", {}, ready=False).rows()[0] == ("node", "stopped")
    rows = NodeStatus("n", {"containerd": 1, "kube-scheduler": 2, "kubelet": 3}, ready=True).rows()
    assert rows == [("node", "Ready (n)"), ("containerd", "pid 1"), ("kube-scheduler", "pid 2"),
                    ("kubelet", "pid 3")]


def test_a_home_whose_node_never_ran_is_left_alone_by_down(node: LocalNode) -> None:
    node.down()  # no network recorded: no process, rule or interface is looked for
    assert not node.home.exists()


def test_missing_tools_names_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda tool: None if tool == "runc" else f"/usr/bin/{tool}")
    assert "runc" in missing_tools()


@pytest.mark.parametrize(("reference", "base"), [
    ("localhost/stead:dev", "localhost/stead"), ("registry:5000/stead", "registry:5000/stead"),
    ("registry:5000/stead:v1", "registry:5000/stead"), ("stead", "stead"),
])
def test_image_base_name(reference: str, base: str) -> None:
    assert image_base_name(reference) == base


def test_oci_archive_is_reproducible_and_names_the_image(tmp_path: Path) -> None:
    (tmp_path / "pause").write_bytes(b"\x7fELF...")
    (tmp_path / "pause").chmod(0o755)
    first = oci_archive("stead.local/pause:1", tmp_path, entrypoint=["/pause"])
    assert oci_archive("stead.local/pause:1", tmp_path, entrypoint=["/pause"]) == first
    with tarfile.open(fileobj=io.BytesIO(first)) as tar:
        names = tar.getnames()
        index = json.loads(tar.extractfile("index.json").read())  # type: ignore[union-attr]
        (manifest_ref,) = index["manifests"]
        assert manifest_ref["annotations"]["io.containerd.image.name"] == "stead.local/pause:1"
        manifest = json.loads(tar.extractfile(f"blobs/sha256/{manifest_ref['digest'][7:]}").read())  # type: ignore[union-attr]
        (layer_ref,) = manifest["layers"]
        layer = tar.extractfile(f"blobs/sha256/{layer_ref['digest'][7:]}").read()  # type: ignore[union-attr]
    assert "oci-layout" in names
    with tarfile.open(fileobj=io.BytesIO(layer)) as inner:
        (member,) = inner.getmembers()
        assert (member.name, member.uid, member.mtime, member.mode & 0o777) == ("pause", 0, 0, 0o755)


def test_why_no_node_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    from operators.cluster import node as module

    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert "needs root" in (module.node_unavailable_reason() or "")
    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setattr(module, "missing_tools", lambda: ["containerd"])
    assert module.node_unavailable_reason() == (
        "the local node needs containerd: `make node-tools` installs Debian's containerd, runc and "
        "containernetworking-plugins")
