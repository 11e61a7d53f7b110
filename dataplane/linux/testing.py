"""Helpers for tests, labs and benchmarks of the real backend: a sample cluster network,
unique cluster ids, a realise-and-always-remove context manager, and a leftover check.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from ipaddress import IPv4Address, ip_network
from typing import Any, Literal

from dataplane.linux import nsenter
from dataplane.linux.netns import list_ours
from dataplane.linux.realize import RealCluster, realize, teardown
from dataplane.linux.servers import is_ours
from dataplane.linux.state import StateDir
from netmodel import topology
from netmodel.network import ClusterNetwork


@dataclass(frozen=True, slots=True)
class Sample:
    """A sample network and the facts tests need about it."""

    network: ClusterNetwork
    nodes: tuple[topology.NodeInfo, ...]
    pods: tuple[topology.PodInfo, ...]

    def pod(self, key: str) -> topology.PodInfo:
        return next(p for p in self.pods if p.key == key)


def sample_network(
    nodes: int = 2,
    pods_per_node: int = 2,
    *,
    overlay: Literal["vxlan", "host-gw"] = "vxlan",
    external_clients: Sequence[str] = (),
) -> Sample:
    """``n<i>`` nodes on 172.18.0.0/16 (node i at .i+2, podCIDR 10.244.i.0/24) with pods
    ``default/p<i>-<j>`` at 10.244.i.(j+2), i.e. in host-local's allocation order."""
    infos = tuple(
        topology.node_info(f"n{i}", f"172.18.0.{i + 2}", f"10.244.{i}.0/24") for i in range(nodes)
    )
    pods = tuple(
        topology.PodInfo(f"default/p{i}-{j}", f"n{i}", IPv4Address(f"10.244.{i}.{j + 2}"))
        for i in range(nodes)
        for j in range(pods_per_node)
    )
    net = topology.build(
        ip_network("172.18.0.0/16"),  # type: ignore[arg-type]
        infos,
        pods,
        overlay=overlay,
        external_clients=external_clients,
    )
    return Sample(net, infos, pods)


def unique_cluster_id(prefix: str = "t") -> str:
    """``<prefix><8 hex>``: fresh for every call (parallel runs never collide)."""
    return f"{prefix}{secrets.token_hex(4)}"


def leftovers(cluster_id: str) -> list[str]:
    """Whatever of cluster ``cluster_id`` is still there: namespaces, its state dir,
    live pod-server processes (by pid file). Empty when cleanly removed."""
    prefix = f"svclab-{cluster_id}-"
    left = [f"netns {n}" for n in list_ours() if n.startswith(prefix)]
    st = StateDir.of(cluster_id)
    if st.root.exists():
        left.append(f"state dir {st.root}")
        for pid_file in st.servers_dir.glob("*.pid"):
            try:
                pid = int(pid_file.read_text())
            except (OSError, ValueError):
                continue
            if is_ours(pid):
                left.append(f"process {pid}")
    return left


def processes_in(namespaces: Sequence[str]) -> list[int]:
    """Pids of processes whose network namespace is one of ``namespaces``."""
    inodes = {i for i in (nsenter.inode(n) for n in namespaces) if i is not None}
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}/ns/net").st_ino in inodes:
                    found.append(int(entry))
            except OSError:
                continue
    return found


@contextmanager
def realized(network: ClusterNetwork, **kwargs: Any) -> Iterator[RealCluster]:
    """Realise ``network`` under a fresh cluster id (unless ``cluster_id`` is given);
    always tear it down, and raise if anything of it is left."""
    cid = kwargs.pop("cluster_id", None) or unique_cluster_id()
    try:
        yield realize(network, cluster_id=cid, **kwargs)
    finally:
        teardown(cid)
        left = leftovers(cid)
        if left:
            raise AssertionError(f"cluster {cid} left behind: {left}")
