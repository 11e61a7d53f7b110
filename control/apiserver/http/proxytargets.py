"""Where kube-apiserver's proxy subresources connect (their ``ResourceLocation``): the
address a ``services/NAME/proxy``, ``pods/NAME/proxy`` or ``nodes/NAME/proxy``
request goes to, chosen from the stored objects, with kube-apiserver's refusals.

The name in the URL carries the scheme and port: ``NAME``, ``NAME:PORT`` or
``SCHEME:NAME:PORT`` (``SCHEME``: ``http``, ``https`` or empty; anything else, an
empty name or more parts: 400 ``invalid service request "ID"``, ``invalid pod
request``, ``invalid node request``).

* **services**: a port *number* is first turned into the name of the Service port
  with that number (none: 503 ``no service port 81 found for service "web"``); then
  a ready endpoint of an EndpointSlice of the Service whose port has that name (the
  empty name when the URL names no port) is picked at random, among the endpoints
  whose target is a pod of the namespace holding that address (kube-apiserver's
  ``isValidAddress``), and the connection goes to its address and that endpoint port
  (the pod's targetPort): the apiserver load-balances itself, kube-proxy's rules are
  not used. No endpoint at all: 503 ``no endpoints available for service "web"``;
  none with that port: the same with the whole ``ID`` (``"web:81x"``). A Service
  without selector and without slices: 404 ``endpoints "web" not found``.
* **pods**: the pod's IP (none, or not a global unicast address: 400 ``address not
  allowed``) and the port of the URL, else the first port a container declares,
  else the scheme's (80/443). A port name is looked up as Go's dialer does it,
  in ``/etc/services`` (``http`` is 80).
* **nodes**: without a port, or with the kubelet's, the node's kubelet (``https``,
  its ``daemonEndpoints.kubeletEndpoint.Port``, 10250 by default); with another port,
  that port on the node's address and the scheme of the URL.

The default scheme is ``http`` (kube-apiserver's proxy handler fills it in).
"""

from __future__ import annotations

import ipaddress
import random
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from control.apiserver.http.status import APIError
from netmodel.objects import EndpointSlice, Node, ObjectReference, Pod, Service

#: schemes a proxy name may carry (Go's ``utilnet.SplitSchemeNamePort``)
SCHEMES = ("", "http", "https")
KUBELET_PORT = 10250


@dataclass(frozen=True, slots=True)
class Target:
    """An address to proxy to. ``kubelet``: the node's kubelet API (answered from the
    store, :mod:`.kubeletapi`), not a connection."""

    scheme: str
    host: str
    port: int
    kubelet: str = ""


def split_scheme_name_port(id_: str) -> tuple[str, str, str] | None:
    """``(scheme, name, port)`` of ``NAME``, ``NAME:PORT`` or ``SCHEME:NAME:PORT``;
    None when invalid (empty name, an unknown scheme, more than three parts)."""
    parts = id_.split(":")
    if len(parts) == 1:
        scheme, name, port = "", parts[0], ""
    elif len(parts) == 2:
        scheme, name, port = "", parts[0], parts[1]
    elif len(parts) == 3:
        scheme, name, port = parts
    else:
        return None
    if not name or scheme not in SCHEMES:
        return None
    return scheme, name, port


def _unavailable(message: str) -> APIError:
    return APIError(503, "ServiceUnavailable", message, {})


def _not_found(kind: str, name: str) -> APIError:
    return APIError(404, "NotFound", f'{kind} "{name}" not found', {"name": name, "kind": kind})


def _number(text: str) -> int | None:
    """``text`` as Go's ``strconv.ParseInt(text, 10, 64)`` reads it (None: not one)."""
    body = text[1:] if text[:1] in "+-" else text
    if not body.isascii() or not body.isdigit():
        return None
    return int(text)


def service_target(
    id_: str,
    service: Service | None,
    slices: Sequence[EndpointSlice],
    pods: Callable[[str], Pod | None],
    rng: random.Random | None = None,
) -> Target:
    """The endpoint a ``services/ID/proxy`` request goes to (see the module docstring).
    ``service``: the stored Service named by ``ID`` (None: there is none); ``slices``:
    its EndpointSlices; ``pods``: the namespace's pod of a name (None: none); ``rng``:
    the random choice among the fitting endpoints."""
    parsed = split_scheme_name_port(id_)
    if parsed is None:
        raise APIError(400, "BadRequest", f'invalid service request "{id_}"', {})
    scheme, name, port = parsed
    number = _number(port)
    if number is not None:
        if service is None:
            raise _not_found("services", name)
        names = [p.name or "" for p in service.spec.ports if p.port == number]
        if not names:
            raise _unavailable(f'no service port {number} found for service "{name}"')
        port = names[0]
    if not slices and (service is None or not service.spec.selector):
        raise _not_found("endpoints", name)
    if not any(ep.addresses for s in slices for ep in s.endpoints):
        raise _unavailable(f'no endpoints available for service "{name}"')
    choices: list[tuple[str, int]] = []
    for s in slices:
        ports = [p.port for p in s.ports if (p.name or "") == port and p.port is not None]
        if not ports:
            continue
        for ep in s.endpoints:
            if ep.conditions.ready is False:
                continue
            for addr in ep.addresses:
                if _valid_address(addr, ep.target_ref, s.namespace, pods):
                    choices.append((addr, ports[0]))
    if not choices:
        raise _unavailable(f'no endpoints available for service "{id_}"')
    host, target_port = (rng or random).choice(choices)
    return Target(scheme or "http", host, target_port)


def _valid_address(
    addr: str, ref: ObjectReference | None, namespace: str, pods: Callable[[str], Pod | None]
) -> bool:
    """kube-apiserver's ``isValidAddress``: the endpoint names a pod of the namespace
    that holds this address."""
    if ref is None or (ref.kind and ref.kind != "Pod") or not ref.name:
        return False
    if (ref.namespace or namespace) != namespace:
        return False
    pod = pods(ref.name)
    if pod is None:
        return False
    ips = {pod.status.pod_ip, *(p.ip for p in pod.status.pod_ips)}
    return addr in ips


def pod_target(id_: str, pod: Pod | None) -> Target:
    """The address a ``pods/ID/proxy`` request goes to (see the module docstring);
    ``pod``: the stored pod named by ``ID`` (None: there is none)."""
    parsed = split_scheme_name_port(id_)
    if parsed is None:
        raise APIError(400, "BadRequest", f'invalid pod request "{id_}"', {})
    scheme, name, port = parsed
    if pod is None:
        raise _not_found("pods", name)
    if not port:
        declared = [p.container_port for c in pod.spec.containers for p in c.ports]
        port = str(declared[0]) if declared else ""
    ip = pod.status.pod_ip or ""
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        addr = None
    if addr is None or not _global_unicast(addr):
        raise APIError(400, "BadRequest", "address not allowed", {})
    scheme = scheme or "http"
    return Target(scheme, ip, resolve_port(port, scheme, ip))


def _global_unicast(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Go's ``net.IP.IsGlobalUnicast``: not unspecified, loopback, multicast,
    link-local or the IPv4 broadcast address (private addresses are global unicast)."""
    if addr.is_unspecified or addr.is_loopback or addr.is_multicast or addr.is_link_local:
        return False
    return not (isinstance(addr, ipaddress.IPv4Address) and int(addr) == 0xFFFFFFFF)


def resolve_port(port: str, scheme: str, host: str) -> int:
    """The TCP port a URL's port text dials: a number; the scheme's when empty; a
    service name looked up in ``/etc/services`` as Go's dialer does (unknown: 503
    with the dialer's error)."""
    if not port:
        return 443 if scheme == "https" else 80
    number = _number(port)
    if number is not None and 0 <= number <= 65535:
        return number
    try:
        return socket.getservbyname(port, "tcp")
    except OSError:
        raise _unavailable(
            f"error trying to reach service: dial tcp: address {host}:{port}: unknown port"
        ) from None


def node_target(id_: str, node: Node | None) -> Target:
    """The address a ``nodes/ID/proxy`` request goes to (see the module docstring);
    ``node``: the stored Node named by ``ID`` (None: there is none)."""
    parsed = split_scheme_name_port(id_)
    if parsed is None:
        raise APIError(400, "BadRequest", f'invalid node request "{id_}"', {})
    scheme, name, port = parsed
    if node is None:
        raise _not_found("nodes", name)
    host = _node_address(node)
    kubelet = kubelet_port(node)
    if not port or port == str(kubelet):
        return Target("https", host, kubelet, kubelet=node.name)
    return Target(scheme or "http", host, resolve_port(port, scheme or "http", host))


def kubelet_port(node: Node) -> int:
    """The node's ``status.daemonEndpoints.kubeletEndpoint.Port`` (10250 unset)."""
    extra = node.status.model_extra or {}
    port = ((extra.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
    return port if isinstance(port, int) and port > 0 else KUBELET_PORT


def _node_address(node: Node) -> str:
    """The address kube-apiserver reaches a node at: the first of its addresses by the
    preferred types, in the order kubeadm gives ``--kubelet-preferred-address-types``
    (InternalIP, ExternalIP, Hostname); none: 503 with the connection getter's words."""
    for t in ("InternalIP", "ExternalIP", "Hostname"):
        for a in node.status.addresses:
            if a.type == t:
                return a.address
    known = " ".join(f"{{{a.type} {a.address}}}" for a in node.status.addresses)
    raise _unavailable(f"no preferred addresses found; known addresses: [{known}]")
