"""Discovery documents: ``/api``, ``/apis``, ``/apis/G``, resource lists per
group/version, and the aggregated form (``apidiscovery.k8s.io/v2``) that kubectl 1.26+
asks for first, all built from :data:`.resources.RESOURCES`."""

from __future__ import annotations

from typing import Any

from control.apiserver.http.resources import RESOURCES, Resource, group_versions, in_group_version

AGGREGATED_V2 = "apidiscovery.k8s.io"


def _resource_entry(r: Resource) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": r.name,
        "singularName": r.singular,
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": sorted(r.verbs),
    }
    if r.short_names:
        d["shortNames"] = list(r.short_names)
    if r.categories:
        d["categories"] = list(r.categories)
    return d


#: the subresources kube-apiserver serves by connecting to a node (kubelet) or through
#: the cluster network, with the kind and verbs its discovery lists for them
CONNECT_SUBRESOURCES: dict[tuple[str, str], tuple[str, tuple[str, ...]]] = {
    ("pods", "attach"): ("PodAttachOptions", ("create", "get")),
    ("pods", "exec"): ("PodExecOptions", ("create", "get")),
    ("pods", "log"): ("Pod", ("get",)),
    ("pods", "portforward"): ("PodPortForwardOptions", ("create", "get")),
    ("pods", "proxy"): ("PodProxyOptions", ("create", "delete", "get", "patch", "update")),
    ("pods", "ephemeralcontainers"): ("Pod", ("get", "patch", "update")),
    ("services", "proxy"): ("ServiceProxyOptions", ("create", "delete", "get", "patch", "update")),
    ("nodes", "proxy"): ("NodeProxyOptions", ("create", "delete", "get", "patch", "update")),
}


def _sub_entries(r: Resource) -> list[dict[str, Any]]:
    out = []
    for sub in r.subresources:
        if sub == "binding":
            out.append(
                {
                    "name": f"{r.name}/binding",
                    "singularName": "",
                    "namespaced": True,
                    "kind": "Binding",
                    "verbs": ["create"],
                }
            )
        elif sub == "eviction":  # pods/eviction takes a policy/v1 Eviction
            out.append(
                {
                    "name": f"{r.name}/eviction",
                    "singularName": "",
                    "namespaced": True,
                    "group": "policy",
                    "version": "v1",
                    "kind": "Eviction",
                    "verbs": ["create"],
                }
            )
        elif (r.name, sub) in CONNECT_SUBRESOURCES:
            kind, verbs = CONNECT_SUBRESOURCES[(r.name, sub)]
            out.append(
                {
                    "name": f"{r.name}/{sub}",
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": kind,
                    "verbs": list(verbs),
                }
            )
        elif sub == "scale":
            out.append(
                {
                    "name": f"{r.name}/scale",
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "group": "autoscaling",
                    "version": "v1",
                    "kind": "Scale",
                    "verbs": ["get", "patch", "update"],
                }
            )
        else:
            out.append(
                {
                    "name": f"{r.name}/{sub}",
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    # namespaces/finalize: update only, as kube-apiserver lists it
                    "verbs": ["update"] if sub == "finalize" else ["get", "patch", "update"],
                }
            )
    return out


def resource_list(group: str, version: str) -> dict[str, Any] | None:
    rs = in_group_version(group, version)
    if not rs:
        return None
    items: list[dict[str, Any]] = []
    for r in rs:
        items.append(_resource_entry(r))
        items += _sub_entries(r)
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": items,
    }


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    vs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": vs, "preferredVersion": vs[0]}


def api_group_list() -> dict[str, Any]:
    groups = [_group(g, vs) for g, vs in group_versions().items() if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(name: str) -> dict[str, Any] | None:
    vs = group_versions().get(name)
    if not name or vs is None:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, vs)}


def _aggregated_resource(r: Resource) -> dict[str, Any]:
    d: dict[str, Any] = {
        "resource": r.name,
        "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
        "scope": "Namespaced" if r.namespaced else "Cluster",
        "singularResource": r.singular,
        "verbs": sorted(r.verbs),
    }
    if r.short_names:
        d["shortNames"] = list(r.short_names)
    if r.categories:
        d["categories"] = list(r.categories)
    subs = []
    for s in _sub_entries(r):
        kind = s["kind"]
        group = s.get("group", r.group)
        version = s.get("version", r.version)
        subs.append(
            {
                "subresource": s["name"].split("/", 1)[1],
                "responseKind": {"group": group, "version": version, "kind": kind},
                "verbs": s["verbs"],
            }
        )
    if subs:
        d["subresources"] = subs
    return d


def aggregated(core: bool) -> dict[str, Any]:
    """``APIGroupDiscoveryList`` for ``/api`` (core) or ``/apis`` (named groups)."""
    items = []
    for g, versions in group_versions().items():
        if bool(g) == core:
            continue
        items.append(
            {
                "metadata": {"name": g, "creationTimestamp": None},
                "versions": [
                    {
                        "version": v,
                        "resources": [
                            _aggregated_resource(r)
                            for r in RESOURCES
                            if r.group == g and r.version == v
                        ],
                        "freshness": "Current",
                    }
                    for v in versions
                ],
            }
        )
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    }


def wants_aggregated(accept: str) -> str | None:
    """The content type to answer with when ``accept`` asks for aggregated discovery
    (v2, or v2beta1), else None."""
    for part in accept.split(","):
        p = part.replace(" ", "")
        if "as=APIGroupDiscoveryList" in p and "g=apidiscovery.k8s.io" in p:
            if "v=v2beta1" in p:
                return "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
            if "v=v2" in p:
                return "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    return None
