"""The cluster the connect/exec policy-attribution tests share (emulator and kernel): a
Service ``default/web`` over two pods on node-2 that ``default/allow-frontend`` lets in
from namespaces labelled ``team=web`` only, on the named port ``http``; a client in such
a namespace (``front/fe``), one in another namespace (``other/lurker``, refused at the
destination's ingress) and one whose own namespace denies it every egress
(``other/intruder``, refused at its egress by ``other/no-egress``); and a pod no policy
selects (``default/free``)."""

from __future__ import annotations

APP = """\
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: npconnect}
spec: {nodes: 2, dns: false, proxyMode: MODE}
---
apiVersion: v1
kind: Namespace
metadata: {name: front, labels: {team: web}}
---
apiVersion: v1
kind: Namespace
metadata: {name: other}
---
apiVersion: v1
kind: Pod
metadata: {name: web-1, labels: {app: web}}
spec:
  nodeName: node-2
  containers: [{name: c, image: agnhost, ports: [{name: http, containerPort: 8080}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: web-2, labels: {app: web}}
spec:
  nodeName: node-2
  containers: [{name: c, image: agnhost, ports: [{name: http, containerPort: 8080}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: free, labels: {app: free}}
spec:
  nodeName: node-2
  containers: [{name: c, image: agnhost, ports: [{name: http, containerPort: 8080}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: fe, namespace: front, labels: {app: fe}}
spec:
  nodeName: node-1
  containers: [{name: c, image: agnhost}]
---
apiVersion: v1
kind: Pod
metadata: {name: lurker, namespace: other, labels: {app: y}}
spec:
  nodeName: node-1
  containers: [{name: c, image: agnhost}]
---
apiVersion: v1
kind: Pod
metadata: {name: intruder, namespace: other, labels: {app: x}}
spec:
  nodeName: node-1
  containers: [{name: c, image: agnhost}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: http}]
---
apiVersion: v1
kind: Service
metadata: {name: free}
spec:
  selector: {app: free}
  ports: [{port: 80, targetPort: http}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow-frontend}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress:
  - from:
    - podSelector: {matchLabels: {app: nothing}}
    - namespaceSelector: {matchLabels: {team: web}}
    ports: [{port: http}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: no-egress, namespace: other}
spec:
  podSelector: {matchLabels: {app: x}}
  policyTypes: [Egress]
"""

ACCEPT = "default/allow-frontend ingress[0].from[1] (namespaceSelector team=web) → ACCEPT"
REFUSE_INGRESS = "default/allow-frontend (ingress, no rule matched) → DROP"
REFUSE_EGRESS = "other/no-egress (egress, no rule matched) → DROP"

ACCEPT_JSON = {
    "direction": "ingress",
    "verdict": "ACCEPT",
    "policy": "default/allow-frontend",
    "rule": "ingress[0].from[1]",
    "reason": "namespaceSelector team=web",
    "text": ACCEPT,
}
REFUSE_INGRESS_JSON = {
    "direction": "ingress",
    "verdict": "DROP",
    "policy": "default/allow-frontend",
    "rule": None,
    "reason": "ingress, no rule matched",
    "text": REFUSE_INGRESS,
}
REFUSE_EGRESS_JSON = {
    "direction": "egress",
    "verdict": "DROP",
    "policy": "other/no-egress",
    "rule": None,
    "reason": "egress, no rule matched",
    "text": REFUSE_EGRESS,
}


def without_policies(app: str) -> str:
    """``app`` with its NetworkPolicies left out."""
    return app.split("---\napiVersion: networking.k8s.io/v1")[0]
