"""The apiserver's own endpoints: the EndpointSlice ``default/kubernetes``.

kube-apiserver's endpoint reconciler publishes where the apiservers listen, in the
Endpoints and EndpointSlice objects named like the ``default/kubernetes`` Service (which
has no selector, so the EndpointSlice controller leaves them alone). svclab has one
apiserver and no Endpoints kind, so this is one EndpointSlice:

* name ``kubernetes`` in ``default``, label ``kubernetes.io/service-name: kubernetes``
  (no ``managed-by`` label and no owner, as kube-apiserver writes it);
* ``addressType: IPv4``, one endpoint: the advertise address
  (:meth:`netmodel.cluster.ClusterSpec.apiserver_address`), ``ready: true``, no nodeName;
* one port: ``https``, 6443, TCP.

Nothing in the emulated or the real cluster listens on 6443 (only pods run servers), so
a connection to the Service is DNATed to ``ADDRESS:6443`` and refused there by the node
(TCP RST), on both backends.
"""

from __future__ import annotations

from netmodel.cluster import ClusterSpec
from netmodel.objects import (
    Endpoint,
    EndpointConditions,
    EndpointPort,
    EndpointSlice,
    ObjectMeta,
)

#: The Service and the slice: ``default/kubernetes``.
NAMESPACE = "default"
NAME = "kubernetes"
KEY = f"{NAMESPACE}/{NAME}"
#: The port the apiserver serves on (kube-apiserver's ``--secure-port`` default).
SECURE_PORT = 6443
PORT_NAME = "https"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"


def kubernetes_endpoint_slice(address: str) -> EndpointSlice:
    """The EndpointSlice ``default/kubernetes`` for an apiserver at ``address`` (IPv4)."""
    return EndpointSlice(
        metadata=ObjectMeta(name=NAME, namespace=NAMESPACE, labels={SERVICE_NAME_LABEL: NAME}),
        address_type="IPv4",
        endpoints=[Endpoint(addresses=[address], conditions=EndpointConditions(ready=True))],
        ports=[EndpointPort(name=PORT_NAME, port=SECURE_PORT, protocol="TCP")],
    )


def desired_slice(cluster: ClusterSpec) -> EndpointSlice | None:
    """The slice the apiserver keeps for ``cluster``: None when the Cluster has no
    ``default/kubernetes`` Service (``kubernetesService: false``) or no apiserver
    address (no node)."""
    if not cluster.kubernetes_service:
        return None
    address = cluster.apiserver_address()
    return None if address is None else kubernetes_endpoint_slice(address)


def same_content(a: EndpointSlice, b: EndpointSlice) -> bool:
    """Whether two slices agree on what the reconciler owns: the service-name label,
    the address type, the endpoints and the ports (other labels and annotations a user
    added are left as they are)."""
    return (
        a.labels.get(SERVICE_NAME_LABEL) == b.labels.get(SERVICE_NAME_LABEL)
        and a.address_type == b.address_type
        and a.endpoints == b.endpoints
        and a.ports == b.ports
    )
