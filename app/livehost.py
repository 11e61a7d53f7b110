"""Which nodes the live control plane's kubelets and kube-proxies act on.

:func:`node_host` picks the :class:`control.nodehost.NodeHost`: emulated nodes in the
process's memory, or (``real``) the kernel's nodes of the cluster ``svclab up --real``
built from the state directory (:class:`app.realnode.RealNodeHost`, imported only
then: it needs root and the kernel's tools)."""

from __future__ import annotations

from pathlib import Path

from control.nodehost import EmulatedNodeHost, NodeHost
from netmodel.cluster import ClusterSpec


def node_host(state_dir: Path, cluster: ClusterSpec, *, real: bool) -> NodeHost:
    """The nodes' host for the cluster stored in ``state_dir`` (see the module
    docstring)."""
    if real:
        from app.realnode import RealNodeHost

        return RealNodeHost(state_dir, cluster)
    return EmulatedNodeHost(cluster)


__all__ = ["node_host"]
