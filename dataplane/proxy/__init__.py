"""kube-proxy's renderers: what a real node would load, as pure functions.

Typical use (the kube-proxy agent, the ``svclab rules`` CLI)::

    from dataplane.proxy import build_node_config, build_snapshot, render

    cfg = build_node_config(proxy_config, cluster.spec, node.name, node_ips, node_pod_cidr)
    snap = build_snapshot(services, endpointslices, cfg)
    out = render("iptables", snap, cfg)
    out.restore_input   # what is loaded: iptables-restore --noflush payload / nft -f text
    out.save_text       # what iptables-save / nft list ruleset / ipvsadm-save+ipset show

Incremental syncs: feed watch events to a :class:`ChangeTracker`, call ``apply()`` and
pass what it returns as ``changed`` (with the chains the kernel holds as
``existing_chains``) to render only what changed, as upstream's partial syncs do.
nftables mode keeps stale chains (flushed) for a while before deleting them: pass the
previous render's ``stale_since`` and the sync's time as ``now``, and run
``cleanup_input`` before ``restore_input``.

Mode-specific extras live on the returned objects: :class:`IptablesRender`
(``jump_rules``, ``ensure_input()``, ``active_chains``, ``stale_chains``,
``large_cluster``), :class:`IpvsRender` (``virtual_servers``, ``ipsets``,
``ipvsadm_text``, ``ipset_text``, ``addresses``, ``jump_rules``, ``ensure_input()``),
:class:`NftablesRender` (``sets``, ``chains``, ``stale``, ``cleanup_input``,
``deleted``, ``stale_since``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Literal, Protocol

from dataplane.proxy.iptables import IptablesRender, JumpRule, render_iptables
from dataplane.proxy.ipvs import IpvsRender, RealServer, VirtualServer, render_ipvs
from dataplane.proxy.model import (
    EndpointInfo,
    IPFamily,
    LocalDetector,
    NodeProxyConfig,
    ProxySnapshot,
    ServicePortInfo,
    ServicePortName,
    ServicePortState,
)
from dataplane.proxy.nftables import NftablesRender, render_nftables
from dataplane.proxy.normalize import consistency_errors, normalize
from dataplane.proxy.snapshot import build_node_config, build_snapshot
from dataplane.proxy.tracker import ChangeTracker
from netmodel.objects import EndpointSlice, Service

Mode = Literal["iptables", "ipvs", "nftables"]
MODES: tuple[Mode, ...] = ("iptables", "ipvs", "nftables")


class RenderedRules(Protocol):
    """What every mode's render result offers."""

    @property
    def restore_input(self) -> str:
        """The text that is loaded (iptables-restore payload, or nft -f transaction)."""
        ...

    @property
    def save_text(self) -> str:
        """What the node's tools would show afterwards."""
        ...


def render(
    mode: Mode,
    snapshot: ProxySnapshot,
    node_config: NodeProxyConfig,
    *,
    changed: Collection[ServicePortName | str] | None = None,
    existing_chains: Iterable[str] = (),
    stale_since: Mapping[str, float] | None = None,
    now: float = 0.0,
) -> IptablesRender | IpvsRender | NftablesRender:
    """Render one sync in ``mode`` (pure; deterministic).

    ``changed`` (None = full sync) and ``existing_chains`` drive partial syncs and stale
    cleanup in iptables and nftables modes; IPVS mode always renders the full state.
    ``stale_since`` and ``now`` (nftables mode only) time the deletion of stale chains
    (:func:`~dataplane.proxy.nftables.render_nftables`). Raises ValueError for an
    unknown mode.
    """
    if mode == "iptables":
        return render_iptables(
            snapshot, node_config, changed=changed, existing_chains=existing_chains
        )
    if mode == "nftables":
        return render_nftables(
            snapshot,
            node_config,
            changed=changed,
            existing_chains=existing_chains,
            stale_since=stale_since,
            now=now,
        )
    if mode == "ipvs":
        return render_ipvs(snapshot, node_config)
    raise ValueError(f"unknown proxy mode {mode!r} (want one of {', '.join(MODES)})")


def render_objects(
    mode: Mode,
    services: Iterable[Service],
    endpointslices: Iterable[EndpointSlice],
    node_config: NodeProxyConfig,
) -> IptablesRender | IpvsRender | NftablesRender:
    """Full render straight from Kubernetes objects (``build_snapshot`` + ``render``)."""
    return render(mode, build_snapshot(services, endpointslices, node_config), node_config)


__all__ = [
    "MODES",
    "ChangeTracker",
    "EndpointInfo",
    "IPFamily",
    "IptablesRender",
    "IpvsRender",
    "JumpRule",
    "LocalDetector",
    "Mode",
    "NftablesRender",
    "NodeProxyConfig",
    "ProxySnapshot",
    "RealServer",
    "RenderedRules",
    "ServicePortInfo",
    "ServicePortName",
    "ServicePortState",
    "VirtualServer",
    "build_node_config",
    "build_snapshot",
    "consistency_errors",
    "normalize",
    "render",
    "render_iptables",
    "render_ipvs",
    "render_nftables",
    "render_objects",
]
