"""What the local node's processes are told: containerd's, the CNI bridge plugin's and the kubelet's configuration.

`LocalNode` (node.py) writes these files under its home and starts the processes that read them;
here they are pure functions of the node's paths and network, each setting beside the reason it is
set (most answer a limit of these machines: no CAP_SYS_RESOURCE, cgroup v1, no registry). Kept
apart so that the configuration can be read, and tested, without a node.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from operators.cluster.images import PAUSE_IMAGE
from operators.cluster.nodehost import NodeNetwork
from operators.cluster.processes import LOOPBACK

KUBELET_PORT: Final = 10250
KUBELET_HEALTHZ_PORT: Final = 10248
SCHEDULER_PORT: Final = 10259
"""The standard ports, on the node's own bridge address: one node per bridge, so they never clash."""
CNI_BIN_DIR: Final = Path("/usr/lib/cni")


def containerd_config(home: Path, socket: Path) -> str:
    """containerd's configuration: every path under the node's `home`, its own `socket`."""
    root = home / "containerd"
    return f"""\
# containerd of Stead's local node: every path under {home}, its own socket.
version = 2
root = "{root / 'root'}"
state = "{root / 'state'}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{root / 'opt'}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # Without CAP_SYS_RESOURCE no process may lower its oom_score_adj: never ask for less than
  # containerd's own (the sandbox's -998 and Guaranteed Pods' -997 would fail with EPERM).
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "{LOOPBACK}"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{root / 'runc'}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{home / 'cni' / 'net.d'}"
    max_conf_num = 1
"""


def cni_config(network: NodeNetwork, ipam_dir: Path) -> dict[str, object]:
    """The bridge exists beforehand with the node's address: no ``isGateway`` (which would turn on
    ``ip_forward`` for the whole machine) and no masquerading. Pods route via the node's address,
    which forwards nothing."""
    return {
        "cniVersion": "1.0.0",
        "name": "stead-pods",
        "plugins": [{
            "type": "bridge", "bridge": network.bridge, "isGateway": False, "ipMasq": False,
            "hairpinMode": True,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": network.subnet, "rangeStart": network.first_pod_ip,
                             "gateway": network.node_ip}]],
                "routes": [{"dst": "0.0.0.0/0", "gw": network.node_ip}],
                "dataDir": str(ipam_dir),
            },
        }],
    }


def kubelet_config(socket: Path, cgroup_root: str, network: NodeNetwork, client_ca: Path) -> dict[str, object]:
    """The kubelet's configuration: on the node's bridge address, its own cgroup, no anonymous access."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "containerRuntimeEndpoint": f"unix://{socket}",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
        "failSwapOn": False,
        "failCgroupV1": False,  # these machines mount the v1 hierarchies (upstream retires them)
        "address": network.node_ip,  # the bridge: reached by the API server, never off the machine
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": network.node_ip,
        "healthzPort": KUBELET_HEALTHZ_PORT,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(client_ca)},
        },
        "authorization": {"mode": "Webhook"},
        "oomScoreAdj": 0,  # no CAP_SYS_RESOURCE: the default -999 cannot be set
        "resolvConf": "",  # there is no cluster DNS; Pods get no copy of the host's resolvers
        "volumePluginDir": "/var/lib/kubelet/volume-plugins",
        "maxPods": 60,
        # Images are imported, never pulled: never collect them.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "512Mi",
                         "imagefs.available": "512Mi"},
        "serializeImagePulls": False,
        "shutdownGracePeriod": "0s",
    }
