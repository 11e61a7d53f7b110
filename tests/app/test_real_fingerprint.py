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
