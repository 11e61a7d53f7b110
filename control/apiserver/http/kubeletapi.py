"""A node's kubelet API as ``nodes/NAME/proxy/...`` reaches it, answered from the store.

kube-apiserver proxies ``nodes/NAME/proxy/PATH`` to ``https://NODE:10250/PATH``, the
kubelet's own HTTP server. svclab's kubelets are components of the control plane, not
HTTP servers, so the answers a kubelet would give are made here from what the store
holds about the node, with kubelet's bodies and headers:

* ``/healthz``: ``ok`` (any method);
* ``/pods`` (``GET``): the PodList of the pods bound to the node (kubelet's pod
  manager: every pod whose ``spec.nodeName`` is the node, terminated ones included),
  items without ``kind``/``apiVersion`` as kubelet encodes them; another method: 405
  ``405: Method Not Allowed`` (its REST framework's answer);
* anything else: 404 with Go's ``404 page not found``. A real kubelet serves more
  (``/metrics``, ``/stats/summary``, ``/logs/``, ``/spec/``, ``/configz``,
  ``/runningpods/``, ``exec``/``attach``/``portForward``...): svclab does not model
  them on this path.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from control.apiserver.http import wire
from netmodel.objects import Pod

TEXT = "text/plain; charset=utf-8"
NOSNIFF = ("X-Content-Type-Options", "nosniff")


@dataclass(frozen=True, slots=True)
class KubeletAnswer:
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes


def answer(method: str, path: str, node: str, pods: Iterable[Pod]) -> KubeletAnswer:
    """What node ``node``'s kubelet answers ``method path`` (``path``: from the root,
    without the query); ``pods``: candidates, the node's are picked here."""
    if path == "/healthz":
        return KubeletAnswer(200, (("Content-Type", TEXT), NOSNIFF), b"ok")
    if path in ("/pods", "/pods/"):
        if method not in ("GET", "HEAD"):
            return KubeletAnswer(405, (("Content-Type", TEXT),), b"405: Method Not Allowed")
        return KubeletAnswer(200, (("Content-Type", "application/json"),), pod_list(node, pods))
    return KubeletAnswer(404, (("Content-Type", TEXT), NOSNIFF), b"404 page not found\n")


def pod_list(node: str, pods: Iterable[Pod]) -> bytes:
    """kubelet's ``/pods`` body: ``{"kind":"PodList","apiVersion":"v1","metadata":{},
    "items":[...]}``, the node's pods in namespace/name order."""
    mine = sorted((p for p in pods if p.spec.node_name == node), key=lambda p: p.key)
    items = []
    for p in mine:
        d = p.to_dict()
        d.pop("kind", None)
        d.pop("apiVersion", None)
        items.append(d)
    return wire.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
