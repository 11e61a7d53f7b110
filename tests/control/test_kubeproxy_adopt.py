"""A writing process over a persistent cluster (apply, delete) starts its kube-proxies
by adopting the rules their start-up sync would load (KubeProxy.adopt) instead of
rendering every node's: what they then sync and record must be what they sync and
record after a real start-up sync, byte for byte."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from control.agents.kubeproxy import KubeProxy
from control.events import timeline
from control.session import Session
from dataplane.proxy import IptablesRender
from netmodel.manifests import load_text

CLUSTER = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
spec: {nodes: 3}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 4
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: nginx, ports: [{containerPort: 8080}]}]
---
apiVersion: v1
kind: Service
metadata: {name: old}
spec: {selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}
"""
MORE = """
apiVersion: v1
kind: Service
metadata: {name: more}
spec: {type: NodePort, selector: {app: web}, ports: [{port: 81, targetPort: 8080}]}
"""


def _changes(state: Path) -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    """Apply MORE, then delete Service ``old`` (its chains go stale), each in a fresh
    session as the CLI does; every node's last payload and the SyncProxyRules Events."""
    payloads: dict[str, str] = {}
    s = Session.open(state)
    try:
        s.apply(load_text(MORE, source="more.yaml"))
    finally:
        s.close()
    s = Session.open(state)
    try:
        s.start_quietly()
        s.plane.delete("Service", "default/old")
        s.converge()
        for name, proxy in s.proxies.items():
            assert isinstance(proxy.last, IptablesRender) and proxy.last.partial
            payloads[name] = proxy.last.restore_input
        events = [
            (e.involved_object.name, e.reason, e.message)
            for e in timeline(s.store)
            if e.reason == "SyncProxyRules"
        ]
    finally:
        s.close()
    return payloads, events


def test_adopting_syncs_and_records_what_a_start_up_sync_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = Session.open(tmp_path / "a", must_exist=False)
    try:
        s.apply(load_text(CLUSTER, source="cluster.yaml"))
    finally:
        s.close()
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    adopted, adopted_events = _changes(tmp_path / "a")
    monkeypatch.setattr(KubeProxy, "adopt", lambda self: False)  # a real start-up sync
    synced, synced_events = _changes(tmp_path / "b")
    assert adopted == synced and len(adopted) == 3
    assert all("-X KUBE-SVC-" in p for p in adopted.values())  # old's chains deleted
    assert adopted_events == synced_events
    assert sum("partial sync" in m for _, _, m in adopted_events) == 6  # 3 nodes x 2
