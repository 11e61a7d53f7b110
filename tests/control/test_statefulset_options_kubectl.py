"""A StatefulSet's minReadySeconds and volumeClaimTemplates through ``svclab serve``,
with the real kubectl: availableReplicas follows minReadySeconds on the server's wall
clock, ``kubectl get pvc`` lists the claims made for each pod, the pods' volumes name
them, and deleting the StatefulSet deletes them (whenDeleted: Delete)."""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "informers"))
from serve_helpers import serve, wait_for

pytestmark = pytest.mark.slow

MIN_READY = 6
APP = f"""
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: default}}
spec:
  clusterIP: None
  selector: {{app: web}}
  ports: [{{name: http, port: 80}}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: web, namespace: default}}
spec:
  replicas: 2
  minReadySeconds: {MIN_READY}
  podManagementPolicy: Parallel
  serviceName: web
  selector: {{matchLabels: {{app: web}}}}
  persistentVolumeClaimRetentionPolicy: {{whenDeleted: Delete, whenScaled: Retain}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers:
      - name: web
        image: nginx:1
        volumeMounts: [{{name: data, mountPath: /data}}]
  volumeClaimTemplates:
  - metadata: {{name: data}}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {{requests: {{storage: 1Gi}}}}
"""


def _ready_since(pod: dict) -> float:
    cond = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
    assert cond["status"] == "True"
    t = dt.datetime.strptime(cond["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ")
    return t.replace(tzinfo=dt.UTC).timestamp()


def test_min_ready_seconds_and_claims_through_kubectl(tmp_path: Path) -> None:
    with serve(tmp_path) as srv:
        out = srv.kubectl("apply", "-f", "-", stdin=APP)
        assert out.returncode == 0, out.stderr

        def status() -> dict:
            got = srv.kubectl("get", "sts", "web", "-o", "json")
            return json.loads(got.stdout).get("status", {}) if got.returncode == 0 else {}

        wait_for(lambda: status().get("readyReplicas") == 2, 60, "both pods Ready")
        wait_for(lambda: status().get("availableReplicas") == 2, 60, "both pods available")
        seen_at = time.time()
        pods = json.loads(srv.kubectl("get", "pods", "-l", "app=web", "-o", "json").stdout)
        # available only after minReadySeconds of readiness (second-precision stamps)
        assert seen_at >= max(_ready_since(p) for p in pods["items"]) + MIN_READY

        pvc = srv.kubectl("get", "pvc")
        assert pvc.returncode == 0, pvc.stderr
        rows = [line.split() for line in pvc.stdout.splitlines()]
        assert len(rows) == 3, f"kubectl get pvc: {pvc.stdout!r} {pvc.stderr!r}"
        assert rows[0][:2] == ["NAME", "STATUS"]
        assert sorted((r[0], r[1]) for r in rows[1:]) == [
            ("data-web-0", "Pending"),
            ("data-web-1", "Pending"),
        ]
        for p in pods["items"]:
            claim = {
                v["name"]: v.get("persistentVolumeClaim", {}).get("claimName")
                for v in p["spec"]["volumes"]
            }
            assert claim["data"] == f"data-{p['metadata']['name']}"
        owners = json.loads(srv.kubectl("get", "pvc", "data-web-0", "-o", "json").stdout)
        refs = owners["metadata"]["ownerReferences"]
        assert [(r["kind"], r["name"], r.get("controller")) for r in refs] == [
            ("StatefulSet", "web", True)
        ]

        assert srv.kubectl("delete", "sts", "web").returncode == 0
        wait_for(
            lambda: srv.kubectl("get", "pvc", "-o", "name").stdout.strip() == "",
            60,
            "the claims go with the StatefulSet (whenDeleted: Delete)",
        )
