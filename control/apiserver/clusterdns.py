"""Cluster DNS as kubeadm installs it (its ``CoreDNS`` addon), created by
:meth:`control.apiserver.server.APIServer.bootstrap` unless the Cluster says ``dns: false``
(cluster DNS is on by default, as kubeadm, kind, k3s and minikube install it):

* the Service ``kube-system/kube-dns``: ClusterIP the tenth address of serviceCIDR,
  selector ``k8s-app: kube-dns``, ports ``dns`` 53/UDP, ``dns-tcp`` 53/TCP and
  ``metrics`` 9153/TCP, labels ``k8s-app: kube-dns``, ``kubernetes.io/name: CoreDNS``;
* the Deployment ``kube-system/coredns``: 2 replicas of pods labelled
  ``k8s-app: kube-dns`` with one container ``coredns`` (containerPorts 53/UDP ``dns``,
  53/TCP ``dns-tcp``, 9153/TCP ``metrics``), tolerating the control-plane taint.

Both are created when missing and never rewritten afterwards: scaling the Deployment
(to 0, to see a cluster without DNS) or editing the Service sticks across restarts.
A pod in ``kube-system`` labelled ``k8s-app: kube-dns`` is a DNS server
(:func:`is_dns_pod`): the emulator answers DNS on its port 53, the real backend runs a
DNS server process in its namespace.
"""

from __future__ import annotations

from netmodel.cluster import ClusterSpec
from netmodel.objects import (
    Container,
    ContainerPort,
    Deployment,
    DeploymentSpec,
    ObjectMeta,
    Pod,
    PodSpec,
    PodTemplateSpec,
    Service,
    ServicePort,
    ServiceSpec,
    Toleration,
)
from netmodel.selectors import LabelSelector

NAMESPACE = "kube-system"
SERVICE = "kube-dns"
DEPLOYMENT = "coredns"
SERVICE_KEY = f"{NAMESPACE}/{SERVICE}"
DEPLOYMENT_KEY = f"{NAMESPACE}/{DEPLOYMENT}"
APP_LABEL = {"k8s-app": "kube-dns"}
IMAGE = "registry.k8s.io/coredns/coredns:v1.11.3"
REPLICAS = 2


def kube_dns_service(cluster: ClusterSpec) -> Service:
    return Service(
        metadata=ObjectMeta(
            name=SERVICE,
            namespace=NAMESPACE,
            labels={
                **APP_LABEL,
                "kubernetes.io/cluster-service": "true",
                "kubernetes.io/name": "CoreDNS",
            },
        ),
        spec=ServiceSpec(
            type="ClusterIP",
            selector=dict(APP_LABEL),
            cluster_ip=cluster.dns_service_ip(),
            ports=[
                ServicePort(name="dns", port=53, protocol="UDP", target_port=53),
                ServicePort(name="dns-tcp", port=53, protocol="TCP", target_port=53),
                ServicePort(name="metrics", port=9153, protocol="TCP", target_port=9153),
            ],
        ),
    )


def coredns_deployment() -> Deployment:
    return Deployment(
        metadata=ObjectMeta(name=DEPLOYMENT, namespace=NAMESPACE, labels=dict(APP_LABEL)),
        spec=DeploymentSpec(
            replicas=REPLICAS,
            selector=LabelSelector(match_labels=dict(APP_LABEL)),
            template=PodTemplateSpec(
                metadata=ObjectMeta(labels=dict(APP_LABEL)),
                spec=PodSpec(
                    containers=[
                        Container(
                            name="coredns",
                            image=IMAGE,
                            ports=[
                                ContainerPort(name="dns", container_port=53, protocol="UDP"),
                                ContainerPort(name="dns-tcp", container_port=53, protocol="TCP"),
                                ContainerPort(name="metrics", container_port=9153, protocol="TCP"),
                            ],
                        )
                    ],
                    tolerations=[
                        Toleration(key="CriticalAddonsOnly", operator="Exists"),
                        Toleration(
                            key="node-role.kubernetes.io/control-plane", effect="NoSchedule"
                        ),
                    ],
                    dnsPolicy="Default",
                ),
            ),
        ),
    )


def is_dns_pod(pod: Pod) -> bool:
    """Does ``pod`` serve cluster DNS (kube-system, label ``k8s-app: kube-dns``)?"""
    return pod.namespace == NAMESPACE and pod.labels.get("k8s-app") == APP_LABEL["k8s-app"]
