"""The Node authorizer: what a kubelet's identity (``system:node:NAME`` in group
``system:nodes``) may reach.

Contract (the parts of kube-apiserver's Node authorizer and NodeRestriction admission
svclab models):

* its own Node: get, create, update, patch, and ``nodes/status``; list and watch of
  nodes only with ``fieldSelector=metadata.name=NAME``;
* pods: list and watch only with ``fieldSelector=spec.nodeName=NAME``; get, update,
  patch, delete and ``pods/status`` only of pods bound to NAME (the caller passes the
  stored pod's node);
* events: create, patch, update; services, endpoints and endpointslices: get, list,
  watch (what a kubelet reads);
* its heartbeat, the Lease ``kube-node-lease/NAME``: get, update, patch, and create in
  ``kube-node-lease`` (kube's system:node role, with NodeRestriction's own-lease rule
  for the named verbs);
* anything else: no opinion (RBAC decides; the bootstrap policy binds nothing to
  ``system:nodes``, so it is refused).
"""

from __future__ import annotations

from control.apiserver.http.rbac import Attributes

NODES_GROUP = "system:nodes"
PREFIX = "system:node:"


def node_name(user_name: str, groups: tuple[str, ...]) -> str | None:
    if NODES_GROUP in groups and user_name.startswith(PREFIX):
        return user_name[len(PREFIX) :]
    return None


def allowed(
    a: Attributes,
    *,
    field_selector: dict[str, str],
    pod_node: str | None,
) -> bool | None:
    """True (allow) or None (no opinion). ``field_selector``: the request's equality
    terms; ``pod_node``: the node the named pod is bound to (None when unknown)."""
    node = node_name(a.user.name, a.user.groups)
    if node is None or not a.resource_request:
        return None
    verb, res, sub = a.verb, a.resource, a.subresource
    if a.group == "" and res == "nodes":
        if a.name == node and verb in ("get", "create", "update", "patch"):
            return True
        if verb in ("list", "watch") and field_selector.get("metadata.name") == node:
            return True
        return None
    if a.group == "" and res == "pods":
        if verb in ("list", "watch") and not sub and field_selector.get("spec.nodeName") == node:
            return True
        if a.name and pod_node == node and verb in ("get", "update", "patch", "delete"):
            return True
        return None
    if (
        a.group in ("", "events.k8s.io")
        and res == "events"
        and verb in ("create", "patch", "update")
    ):
        return True
    if res in ("services", "endpoints", "endpointslices") and verb in ("get", "list", "watch"):
        return True
    own_lease = a.name == node and verb in ("get", "update", "patch")
    if (
        a.group == "coordination.k8s.io"
        and res == "leases"
        and a.namespace == "kube-node-lease"
        and (verb == "create" or own_lease)
    ):
        return True
    return None
