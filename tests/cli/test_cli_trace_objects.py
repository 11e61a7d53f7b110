"""Every hop of ``svclab trace -o json`` names the Kubernetes object and field that made
it (``app.hopobjects``), and every such reference resolves: the object is stored and
the field path exists in its wire form. The Service's hops name its port, the DNAT the
EndpointSlice endpoint and the Pod it delivered to, the cross-node route the other
Node's ``spec.podCIDR``; the text output lists them under ``made by``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from app.cli.main import cli
from control.session import Session

APP = """\
apiVersion: svclab.dev/v1alpha1
kind: Cluster
spec: {nodes: 2, dns: false, proxyMode: MODE}
---
apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: web}}
spec:
  nodeName: node-2
  containers: [{name: c, image: nginx, ports: [{name: http, containerPort: 8080}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  nodeName: node-1
  containers: [{name: c, image: busybox}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  type: NodePort
  selector: {app: web}
  ports: [{name: metrics, port: 9090, targetPort: 9090}, {name: http, port: 80, targetPort: http}]
"""


def run(state: Path, *args: str) -> Result:
    res = CliRunner().invoke(cli, ["--state", str(state), *args])
    assert res.exit_code == 0, res.output
    return res


def _walk(t: dict[str, Any]) -> list[dict[str, Any]]:
    hops = list(t["hops"])
    if t.get("reply"):
        hops += _walk(t["reply"])
    for b in t.get("branches", []):
        hops += _walk(b["trace"])
    return hops


def _refs(hop: dict[str, Any]) -> list[dict[str, Any]]:
    obj = hop["object"]
    return obj if isinstance(obj, list) else [obj]


def _resolve(wire: Any, path: str) -> Any:
    """The value at a field path (``spec.ports[1].nodePort``) of a wire object."""
    for part in path.split("."):
        m = re.fullmatch(r"([A-Za-z]+)((?:\[\d+\])*)", part)
        assert m, path
        wire = wire[m.group(1)]
        for i in re.findall(r"\[(\d+)\]", m.group(2)):
            wire = wire[int(i)]
    return wire


def check_every_hop_resolves(state: Path, trace: dict[str, Any]) -> None:
    s = Session.open(state)
    try:
        for hop in _walk(trace):
            assert "object" in hop, hop
            for ref in _refs(hop):
                key = f"{ref['namespace']}/{ref['name']}" if ref["namespace"] else ref["name"]
                obj = s.store.get(ref["kind"], key)
                assert _resolve(obj.to_dict(), ref["field"]) not in (None, "", []), ref
    finally:
        s.close()


@pytest.mark.parametrize("mode", ["iptables", "nftables", "ipvs"])
def test_every_hop_of_a_trace_names_a_stored_object(tmp_path: Path, mode: str) -> None:
    app = tmp_path / "app.yaml"
    app.write_text(APP.replace("MODE", mode))
    state = tmp_path / "st"
    run(state, "apply", "-f", str(app))
    t = json.loads(
        run(
            state,
            "trace",
            "--from",
            "pod/default/client",
            "--to",
            "svc/default/web:80",
            "-o",
            "json",
        ).output
    )
    assert t["verdict"] == "delivered"
    check_every_hop_resolves(state, t)
    named = [r for h in t["hops"] for r in _refs(h)]
    http = {
        "kind": "Service",
        "namespace": "default",
        "name": "web",
        "field": "spec.ports[1]",
        "by": "kube-proxy",
        "detail": "port http",
    }
    assert http in named
    assert {r["field"] for r in named if r["kind"] == "Service"} == {"spec.ports[1]"}
    if mode != "ipvs":  # IPVS: the scheduler's nat hop; iptables, nftables: the rules too
        assert any(http in _refs(h) for h in t["hops"] if h["kind"] == "rule")
    eps = [r for r in named if r["kind"] == "EndpointSlice"]
    assert eps and {r["detail"] for r in eps} == {f"endpoint {t['delivered_to']['ip']}"}
    assert any(r["kind"] == "Pod" and r["name"] == "web" for r in named)
    routes = [h for h in t["hops"] if h["kind"] == "route" and h["netns"] == "node/node-1"]
    assert any(
        r["kind"] == "Node" and r["name"] == "node-2" and r["field"] == "spec.podCIDR"
        for h in routes
        for r in _refs(h)
    )


def test_nodeport_from_outside_and_the_text_listing(tmp_path: Path) -> None:
    app = tmp_path / "app.yaml"
    app.write_text(APP.replace("MODE", "iptables"))
    state = tmp_path / "st"
    run(state, "apply", "-f", str(app))
    svc = json.loads(run(state, "get", "svc", "web", "-o", "json").output)
    node_port = svc["spec"]["ports"][1]["nodePort"]
    node = json.loads(run(state, "get", "node", "node-1", "-o", "json").output)
    nip = node["status"]["addresses"][0]["address"]
    t = json.loads(
        run(
            state, "trace", "--from", "203.0.113.9", "--to", f"{nip}:{node_port}", "-o", "json"
        ).output
    )
    assert t["verdict"] == "delivered"
    check_every_hop_resolves(state, t)
    outside = [h for h in t["hops"] if not h["netns"].startswith(("pod/", "node/"))]
    assert outside and _refs(outside[0]) == [
        {
            "kind": "Service",
            "namespace": "default",
            "name": "web",
            "field": "spec.ports[1].nodePort",
            "detail": f"nodePort {node_port}",
            "by": "kube-proxy",
        }
    ]
    text = run(state, "trace", "--from", "pod/default/client", "--to", "svc/default/web:80").output
    made = text[text.index("made by:") :]
    assert "Service default/web spec.ports[1] (port http) <- kube-proxy" in made
    assert "Node node-2 spec.podCIDR" in made
