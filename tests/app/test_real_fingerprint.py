"""What makes ``svclab up --real`` (and every ``--real`` command, through
``app.real.ensure_current``) realise the cluster again: the realised view's fingerprint.
Cluster DNS is on by default, and its zone's SOA serial is the store revision, which any
write moves (an Event, a Lease): it must not count, or every command would rebuild the
cluster; a change to the zone's records must."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from app import emulation
from control.session import Session
from dataplane.backends.realise import fingerprint
from netmodel.manifests import load
from netmodel.view import ClusterView

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_soa_serial_does_not_count_but_the_records_do() -> None:
    session = Session.ephemeral(load([str(EXAMPLES / "web.yaml")]))
    try:
        view = emulation.view(session)
    finally:
        session.close()
    zone = view.dns_zone
    assert zone is not None and zone.dns_ip == "10.96.0.10"  # no setting: DNS is on
    later = dataclasses.replace(view, dns_zone=dataclasses.replace(zone, serial=zone.serial + 7))
    assert fingerprint(later) == fingerprint(view)
    changed = dataclasses.replace(
        view, dns_zone=dataclasses.replace(zone, upstream={"example.com": ("192.0.2.1",)})
    )
    assert fingerprint(changed) != fingerprint(view)


PROBED = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: probed}
spec: {nodes: 1, dns: false}
---
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
  - name: c
    image: agnhost
    ports: [{containerPort: 8080}]
    readinessProbe: {%s: {port: 9000}}
"""


def _probed_view(handler: str, tmp_path: Path) -> ClusterView:
    f = tmp_path / f"{handler}.yaml"
    f.write_text(PROBED % handler)
    session = Session.ephemeral(load([str(f)]))
    try:
        return emulation.view(session)
    finally:
        session.close()


def test_a_grpc_probes_port_is_a_grpc_port_of_the_view_and_counts(tmp_path: Path) -> None:
    """The pod servers ``up --real`` starts serve gRPC's health service on the ports the
    view names (its pods' grpc probes'): a tcpSocket probe turned grpc on the same port
    listens on the same ports, yet the cluster is realised again."""
    grpc = _probed_view("grpc", tmp_path)
    tcp = _probed_view("tcpSocket", tmp_path)
    assert dict(grpc.grpc_ports) == {"pod/default/p": frozenset({9000})}
    assert dict(tcp.grpc_ports) == {}
    assert dict(grpc.listeners) == dict(tcp.listeners)
    assert fingerprint(grpc) != fingerprint(tcp)
