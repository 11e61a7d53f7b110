"""Stable per-pod DNS names of a StatefulSet through its governing headless Service, as
CoreDNS's kubernetes plugin answers them: ``web-0.web.NS.svc.cluster.local`` A records and
``_http._tcp.web...`` SRV records whose targets are the pods' names. Asked with
``svclab dig`` on the emulator and (marker ``kernel``) from the real pod's namespace
against the real DNS server process.

The names come from the StatefulSet controller (pods' ``hostname``/``subdomain``) and
the EndpointSlice controller (an endpoint's ``hostname`` when the pod's subdomain is the
Service's name)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from app.cli.main import cli
from dataplane.linux.netns import is_root

MANIFEST = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
spec: {nodes: 2, dns: true}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: None
  selector: {app: web}
  ports: [{name: http, port: 80}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web}
spec:
  replicas: 2
  serviceName: web
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx, ports: [{containerPort: 80}]}]}
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec: {containers: [{name: c, image: busybox}]}
"""
DOMAIN = "web.default.svc.cluster.local."


def _dig(manifest: Path, name: str, qtype: str, *extra: str) -> dict[str, Any]:
    r = CliRunner().invoke(
        cli, ["dig", "pod/client", name, qtype, "-o", "json", "-f", str(manifest), *extra]
    )
    assert r.exit_code == 0, r.output
    out: dict[str, Any] = json.loads(r.stdout)
    return out


def _check(tmp_path: Path, *extra: str) -> None:
    f = tmp_path / "m.yaml"
    f.write_text(MANIFEST)
    srv = _dig(f, f"_http._tcp.{DOMAIN}", "SRV", *extra)
    assert srv["status"] == "NOERROR"
    assert sorted(srv["answer"]) == [
        f"_http._tcp.{DOMAIN} 30 IN SRV 0 50 80 web-{i}.{DOMAIN}" for i in (0, 1)
    ]
    glue = {a.split()[0]: a.split()[-1] for a in srv["additional"]}
    assert sorted(glue) == [f"web-0.{DOMAIN}", f"web-1.{DOMAIN}"]
    assert glue[f"web-0.{DOMAIN}"] != glue[f"web-1.{DOMAIN}"]
    for i in (0, 1):
        a = _dig(f, f"web-{i}.{DOMAIN}", "A", *extra)
        assert a["status"] == "NOERROR"
        assert a["answer"] == [f"web-{i}.{DOMAIN} 30 IN A {glue[f'web-{i}.{DOMAIN}']}"]
    # no third ordinal
    assert _dig(f, f"web-2.{DOMAIN}", "A", *extra)["status"] == "NXDOMAIN"


def test_statefulset_pod_names_resolve_on_the_emulator(tmp_path: Path) -> None:
    _check(tmp_path)


@pytest.mark.kernel
@pytest.mark.skipif(not is_root(), reason="needs root")
def test_statefulset_pod_names_resolve_on_the_kernel(tmp_path: Path) -> None:
    _check(tmp_path, "--real")
