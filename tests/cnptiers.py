"""ClusterNetworkPolicy tier scenarios (tests/data/clusternetworkpolicy/tiers.yaml) over
the upstream NetworkPolicy e2e cluster (x, y, z with pods a, b, c, each serving 80 and
81), and the three readings of them the tests compare: the truth table
:func:`netmodel.clusterpolicy.decide` gives, the one ``svclab reach``'s matrix
(:class:`netmodel.reachtiers.TieredMatrix`) gives, and a probe's
(:func:`app.reachprobe.probe_matrix`). Pairs of a pod with itself are left out (a pod
reaching its own address is never subject to ClusterNetworkPolicy, and its own address
never leaves its namespace)."""

from __future__ import annotations

from pathlib import Path

from app.cli.reach_cmd import cluster_policies, cluster_view
from control.session import Session
from netmodel.clusterpolicy import decide
from netmodel.reachtiers import TieredMatrix

TIERS = Path(__file__).resolve().parent / "data" / "clusternetworkpolicy" / "tiers.yaml"
PORTS = [("TCP", 80), ("TCP", 81), ("UDP", 80)]

Table = dict[tuple[str, str], frozenset[tuple[str, int]]]


def computed(state: Path) -> tuple[Table, Table]:
    """(decide's table, the reach matrix's table) over the stored cluster."""
    session = Session.open(state)
    try:
        pods, policies, namespaces = cluster_view(session)
        cnps = cluster_policies(session)
    finally:
        session.close()
    matrix = TieredMatrix(pods, policies, cnps, namespaces)
    want: Table = {}
    got: Table = {}
    for s in pods:
        for d in pods:
            if s.key == d.key:
                continue
            want[(s.key, d.key)] = frozenset(
                (proto, port)
                for proto, port in PORTS
                if decide(s, d, proto, port, policies, namespaces, cluster_policies=cnps).allowed
            )
            got[(s.key, d.key)] = frozenset(
                (proto, port) for proto, port in PORTS if matrix.allows(s.key, d.key, proto, port)
            )
    return want, got


def without_self(table: Table) -> Table:
    return {k: v for k, v in table.items() if k[0] != k[1]}


def differences(want: Table, got: Table) -> list[str]:
    """One line per pair where ``got`` differs from ``want``."""
    return [
        f"{a} => {b}: want {sorted(want[(a, b)])}, got {sorted(got.get((a, b), frozenset()))}"
        for a, b in sorted(want)
        if want[(a, b)] != got.get((a, b))
    ]
