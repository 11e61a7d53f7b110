"""The cluster the DNS tests ask questions in, as manifest text: a Cluster with kubeadm's
DNS (two coredns pods behind kube-dns), Deployments each behind a Service, and one
client pod that asks.

:func:`manifest` composes the documents; :func:`app` writes one Deployment and its
Service. The text is what ``svclab apply -f`` reads, so a test may write it to a file
for the CLI or load it with :func:`netmodel.manifests.load_text`.
"""

from __future__ import annotations

D = "cluster.local"
KUBE_DNS = "10.96.0.10"
CLIENT = "pod/default/client"

_CLIENT_POD = """\
apiVersion: v1
kind: Pod
metadata: {name: client}
spec: {containers: [{name: c, image: busybox}]}
"""


def app(
    name: str,
    image: str,
    port: int,
    *,
    replicas: int = 2,
    protocol: str | None = None,
    port_name: str | None = None,
    headless: bool = False,
    container: str | None = None,
) -> str:
    """A Deployment ``name`` (pods labelled ``app: name``, one container ``container``
    (default ``name``) of ``image`` serving ``port``) and a Service ``name`` selecting them on that port
    (``protocol`` and ``port_name`` when given; ``clusterIP: None`` when ``headless``)."""
    proto = f", protocol: {protocol}" if protocol else ""
    named = f"name: {port_name}, " if port_name else ""
    cluster_ip = "clusterIP: None, " if headless else ""
    return f"""\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec: {{containers: [{{name: {container or name}, image: {image}, ports: [{{containerPort: {port}{proto}}}]}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: {name}}}
spec: {{{cluster_ip}selector: {{app: {name}}}, ports: [{{{named}port: {port}{proto}}}]}}
"""


def manifest(*apps: str, cluster: str = "nodes: 2, dns: true") -> str:
    """The Cluster (``spec: {cluster}``), then ``apps`` (:func:`app`), then the client pod
    (:data:`CLIENT`), as one multi-document YAML text."""
    head = f"apiVersion: svclab.dev/v1alpha1\nkind: Cluster\nspec: {{{cluster}}}\n"
    return "---\n".join([head, *apps, _CLIENT_POD])
