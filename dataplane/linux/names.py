"""Kernel names for a realised cluster.

The model speaks of logical namespaces (``router``, ``node/NAME``, ``pod/NS/NAME``,
``ext/IP``). In the kernel each becomes ``svclab-<cluster-id>-<role>-<hash>`` where
``hash`` is the first 8 hex digits of the SHA-256 of the logical name. So:

* two realised clusters (a test and a dev cluster, two tests in parallel) never
  collide, because the cluster id differs;
* every name starts with :data:`~dataplane.linux.netns.PREFIX`, so cleanup finds it;
* the mapping is a pure function: any process can recompute it from the cluster id.

Interface names inside namespaces are the model's own (``eth0``, ``cni0``,
``flannel.1``, ``u0``, ...): they only have to be unique per namespace, and the backend
never creates an interface in the root namespace (veth peers are created directly in
their target namespace). :func:`check_ifname` rejects a bad name before the kernel does.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from netmodel.errors import BackendError
from netmodel.hostports import container_id

PREFIX = "svclab-"
IFNAMSIZ = 15
CLUSTER_ID_RE = re.compile(r"^[a-z0-9]{1,12}$")


def check_ifname(name: str) -> str:
    """Return ``name`` if the kernel accepts it as an interface name (1-15 bytes, no
    ``/``, no whitespace, not ``.`` or ``..``); raise BackendError otherwise."""
    if not name or len(name.encode()) > IFNAMSIZ:
        raise BackendError(f"interface name {name!r}: must be 1-{IFNAMSIZ} bytes")
    if name in (".", "..") or "/" in name or ":" in name or any(c.isspace() for c in name):
        raise BackendError(f"interface name {name!r}: contains a forbidden character")
    return name


def check_cluster_id(cluster_id: str) -> str:
    """Cluster ids are 1-12 lowercase letters or digits (they go into every name)."""
    if not CLUSTER_ID_RE.match(cluster_id):
        raise BackendError(f"cluster id {cluster_id!r}: use 1-12 characters [a-z0-9]")
    return cluster_id


def role_of(logical: str) -> str:
    """``node/n1`` -> ``node``; ``router`` -> ``router``. Raises on any other form
    (``node`` alone, ``pod/x`` without a namespace, unknown roles)."""
    head, _, rest = logical.partition("/")
    parts = rest.split("/") if rest else []
    arity = {"router": 0, "node": 1, "ext": 1, "pod": 2}.get(head)
    if arity is None or len(parts) != arity or not all(parts):
        raise BackendError(f"namespace {logical!r}: not router, node/N, pod/NS/N or ext/IP")
    return head


def short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


@dataclass(frozen=True, slots=True)
class ClusterNames:
    """The naming scheme of one realised cluster."""

    cluster_id: str

    def __post_init__(self) -> None:
        check_cluster_id(self.cluster_id)

    @property
    def prefix(self) -> str:
        """Every kernel namespace of this cluster starts with this."""
        return f"{PREFIX}{self.cluster_id}-"

    def netns(self, logical: str) -> str:
        """Kernel namespace name for a logical one (``pod/default/web-1`` ->
        ``svclab-c1-pod-1a2b3c4d``)."""
        return f"{self.prefix}{role_of(logical)}-{short_hash(logical)}"

    def container_id(self, pod_key: str) -> str:
        """The CNI container id of a pod's sandbox (stable, so DEL can be issued by any
        later process): :func:`netmodel.hostports.container_id`, the one the emulator
        names the ``portmap`` plugin's ``CNI-DN-…`` chain with."""
        return container_id(pod_key)

    def owns(self, kernel_name: str) -> bool:
        return kernel_name.startswith(self.prefix)
