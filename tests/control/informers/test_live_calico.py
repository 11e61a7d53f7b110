"""``svclab serve`` on an imported Calico cluster: the live kubelets keep the recorded
block addresses and a new pod never gets one of them, even one that lies in its own
node's podCIDR but is held by a pod of another node (Calico's blocks ignore podCIDRs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from serve_helpers import ROOT, serve, wait_for

pytestmark = pytest.mark.slow

DUMP = ROOT / "tests" / "data" / "kubectl-dumps" / "calico-kubeadm-list.yaml"

POD = """\
apiVersion: v1
kind: Pod
metadata: {name: fresh, namespace: default}
spec:
  nodeName: calico-cp
  containers: [{name: c, image: busybox}]
"""


@pytest.mark.parametrize("components", ["threads", "processes"])
def test_a_new_pod_skips_a_block_address_held_on_another_node(
    tmp_path: Path, components: str
) -> None:
    """In processes mode the kubelet of calico-cp is a process of its own: it learns the
    held address through the Calico CNI plugin's own Pod informer, not a shared table."""
    doc = yaml.safe_load(DUMP.read_text())
    web1 = next(i for i in doc["items"] if i["metadata"]["name"] == "web-1")
    held = "192.168.0.2"  # inside calico-cp's podCIDR 192.168.0.0/24, on calico-worker
    web1["metadata"]["annotations"]["cni.projectcalico.org/podIP"] = f"{held}/32"
    web1["metadata"]["annotations"]["cni.projectcalico.org/podIPs"] = f"{held}/32"
    web1["status"]["podIP"] = held
    web1["status"]["podIPs"] = [{"ip": held}]
    dump = tmp_path / "calico.yaml"
    dump.write_text(yaml.safe_dump(doc))
    with serve(tmp_path, "--components", components, manifest=dump) as s:
        made = s.kubectl("apply", "-f", "-", stdin=POD)
        assert made.returncode == 0, made.stderr

        def ip_of(name: str) -> str | None:
            proc = s.kubectl("get", "pod", name, "-o", "json")
            if proc.returncode != 0:
                return None
            return json.loads(proc.stdout).get("status", {}).get("podIP") or None

        fresh = wait_for(lambda: ip_of("fresh"), 90, "the new pod gets an address")
        assert fresh == "192.168.0.3"  # host-local's next address after the held one
        assert ip_of("web-1") == held and ip_of("web-0") == "192.168.171.66"
