"""Pure parts of the HTTP API: strategic merge patch, RBAC rule matching and
aggregation, the Node authorizer, field selectors, kube's HumanDuration, protobuf
bodies, the authenticators (no server)."""

from __future__ import annotations

import datetime as dt

import pytest
from certs import issue
from cryptography.x509.oid import ExtendedKeyUsageOID

from control.apiserver.http import nodeauthz, patch, pki, tables, wire
from control.apiserver.http.authn import (
    Authenticator,
    ClientCertVerifier,
    Unauthorized,
    load_token_file,
    with_authenticated,
)
from control.apiserver.http.rbac import RBAC, Attributes, bootstrap_policy, rule_allows
from netmodel.errors import InputError
from netmodel.objects import KubeObject, ObjectMeta, PolicyRule, RoleBinding, RoleRef, Subject


def test_strategic_merge_merges_containers_by_name_and_ports_by_key() -> None:
    cur = {
        "spec": {
            "containers": [
                {"name": "a", "image": "x", "ports": [{"containerPort": 80}]},
                {"name": "b", "image": "y"},
            ],
            "tolerations": [{"key": "t"}],
        }
    }
    p = {
        "spec": {
            "containers": [
                {"name": "a", "image": "x2", "ports": [{"containerPort": 81}]},
                {"name": "b", "$patch": "delete"},
            ],
            "tolerations": [{"key": "u"}],
        }
    }
    out = patch.strategic_merge(cur, p, "Pod")
    assert out["spec"]["containers"] == [
        {"name": "a", "image": "x2", "ports": [{"containerPort": 80}, {"containerPort": 81}]}
    ]
    assert out["spec"]["tolerations"] == [{"key": "u"}]  # no merge key: replaced
    svc = {"spec": {"ports": [{"port": 80, "name": "a"}]}}
    out = patch.strategic_merge(svc, {"spec": {"ports": [{"port": 81, "name": "b"}]}}, "Service")
    assert [p["port"] for p in out["spec"]["ports"]] == [80, 81]


def test_strategic_merge_directives() -> None:
    cur = {"metadata": {"labels": {"a": "1", "b": "2"}, "finalizers": ["x", "y"]}}
    out = patch.strategic_merge(
        cur,
        {"metadata": {"labels": {"a": None}, "$deleteFromPrimitiveList/finalizers": ["x"]}},
        "Pod",
    )
    assert out == {"metadata": {"labels": {"b": "2"}, "finalizers": ["y"]}}
    out = patch.strategic_merge(
        cur, {"metadata": {"labels": {"$patch": "replace", "c": "3"}}}, "Pod"
    )
    assert out["metadata"]["labels"] == {"c": "3"}


def test_merge_and_json_patch() -> None:
    assert patch.merge_patch({"a": {"b": 1, "c": 2}}, {"a": {"b": None, "d": 3}}) == {
        "a": {"c": 2, "d": 3}
    }
    assert patch.json_patch({"a": [1]}, [{"op": "add", "path": "/a/-", "value": 2}]) == {
        "a": [1, 2]
    }
    with pytest.raises(patch.PatchError):
        patch.json_patch({"a": 1}, [{"op": "remove", "path": "/nope"}])


class _Reader:
    def __init__(self, objs: list[KubeObject]) -> None:
        self.objs = objs

    def list(self, kind: str, namespace: str | None = None) -> list[KubeObject]:
        return [
            o
            for o in self.objs
            if o.kind == kind and (namespace is None or o.namespace == namespace)
        ]

    def get(self, kind: str, key: str) -> KubeObject:
        for o in self.objs:
            if o.kind == kind and o.key == key:
                return o
        raise KeyError(key)


def test_rbac_default_roles_aggregate_and_bindings_scope() -> None:
    alice = with_authenticated("alice", ["devs"])
    rb = RoleBinding(
        metadata=ObjectMeta(name="rb", namespace="team"),
        role_ref=RoleRef(kind="ClusterRole", name="edit"),
        subjects=[Subject(kind="Group", name="devs")],
    )
    rbac = RBAC(_Reader([*bootstrap_policy(), rb]))
    assert rbac.allowed(Attributes(alice, "delete", "apps", "deployments", "", "team", "x"))
    assert rbac.allowed(Attributes(alice, "list", "", "pods", "", "team"))  # edit aggregates view
    assert not rbac.allowed(Attributes(alice, "list", "", "pods", "", "default"))
    assert not rbac.allowed(
        Attributes(alice, "create", "rbac.authorization.k8s.io", "rolebindings", "", "team")
    )
    assert rbac.allowed(Attributes(alice, "get", path="/version", resource_request=False))
    assert rbac.allowed(
        Attributes(alice, "create", "authorization.k8s.io", "selfsubjectaccessreviews")
    )


def test_rule_matching() -> None:
    u = with_authenticated("u", [])
    rule = PolicyRule(
        verbs=["get"], api_groups=[""], resources=["pods/log", "services"], resource_names=["a"]
    )
    assert rule_allows(rule, Attributes(u, "get", "", "services", "", "ns", "a"))
    assert not rule_allows(rule, Attributes(u, "get", "", "services", "", "ns", "b"))
    assert not rule_allows(rule, Attributes(u, "list", "", "services", "", "ns"))
    assert rule_allows(rule, Attributes(u, "get", "", "pods", "log", "ns", "a"))
    assert not rule_allows(rule, Attributes(u, "get", "", "pods", "", "ns", "a"))


def test_node_authorizer() -> None:
    node = with_authenticated("system:node:n1", ["system:nodes"])
    a = Attributes(node, "get", "", "nodes", "", "", "n1")
    assert nodeauthz.allowed(a, field_selector={}, pod_node=None)
    assert not nodeauthz.allowed(
        Attributes(node, "get", "", "nodes", "", "", "n2"), field_selector={}, pod_node=None
    )
    lst = Attributes(node, "list", "", "pods")
    assert nodeauthz.allowed(lst, field_selector={"spec.nodeName": "n1"}, pod_node=None)
    assert not nodeauthz.allowed(lst, field_selector={}, pod_node=None)
    assert nodeauthz.allowed(
        Attributes(node, "get", "", "pods", "", "d", "p"), field_selector={}, pod_node="n1"
    )
    assert not nodeauthz.allowed(
        Attributes(node, "get", "", "pods", "", "d", "p"), field_selector={}, pod_node="n2"
    )
    other = with_authenticated("system:node:n1", [])  # not in system:nodes
    assert (
        nodeauthz.allowed(
            Attributes(other, "get", "", "nodes", "", "", "n1"), field_selector={}, pod_node=None
        )
        is None
    )


def test_token_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "t.csv"
    f.write_text('abc,alice,1,"a,b"\nxyz,bob,2\n')
    tokens = load_token_file(f)
    assert (
        tokens["abc"].groups == ("a", "b", "system:authenticated") and tokens["xyz"].name == "bob"
    )
    auth = Authenticator(tokens)
    assert auth.authenticate("Bearer abc", None) == tokens["abc"]
    assert auth.authenticate(None, None) is None
    with pytest.raises(Unauthorized):
        auth.authenticate("Bearer nope", None)
    assert auth.authenticate("Basic YTpi", None) is None  # not a credential: anonymous
    f.write_text("abc,alice\n")
    with pytest.raises(InputError, match="line 1"):
        load_token_file(f)


def test_client_certificates_are_verified_as_kube_apiservers_x509_authenticator_does() -> None:
    ca = pki.new_ca()
    verifier = ClientCertVerifier([ca.cert])
    crt, _ = pki.client_cert(ca, "alice", ["devs", "qa"])
    user = verifier.user([crt.decode()])
    assert user.name == "alice" and user.groups == ("devs", "qa", "system:authenticated")
    # no extended key usage at all is fine (Go's x509.Verify treats it as any usage)
    assert verifier.user([issue(ca, "bob")[1]]).name == "bob"
    # a chain through an intermediate CA the client sends along
    inter, inter_pem = issue(ca, "intermediate", ca=True)
    leaf = issue(inter, "carol", eku=[ExtendedKeyUsageOID.CLIENT_AUTH])[1]
    assert verifier.user([leaf, inter_pem]).name == "carol"
    refused = {
        "foreign CA": [
            pki.client_cert(pki.new_ca("other"), "mallory", ["system:masters"])[0].decode()
        ],
        "expired": [
            issue(ca, "old", not_before=dt.timedelta(days=-10), not_after=dt.timedelta(days=-1))[1]
        ],
        "not yet valid": [
            issue(ca, "new", not_before=dt.timedelta(days=1), not_after=dt.timedelta(days=2))[1]
        ],
        "server auth only": [issue(ca, "srv", eku=[ExtendedKeyUsageOID.SERVER_AUTH])[1]],
        "intermediate missing": [leaf],
        "no common name": [issue(ca, "", orgs=("system:masters",))[1]],
    }
    for what, chain in refused.items():
        with pytest.raises(Unauthorized):
            verifier.user(chain)
            pytest.fail(what)


def test_the_certificate_comes_first_then_the_token_as_in_kube_apiserver() -> None:
    ca = pki.new_ca()
    tokens = {"good": with_authenticated("by-token", [])}
    auth = Authenticator(tokens, [ca.cert])
    valid = [pki.client_cert(ca, "by-cert", [])[0].decode()]
    foreign = [pki.client_cert(pki.new_ca("other"), "mallory", [])[0].decode()]
    assert auth.authenticate("Bearer nope", valid).name == "by-cert"  # type: ignore[union-attr]
    assert auth.authenticate("Bearer good", foreign).name == "by-token"  # type: ignore[union-attr]
    for authorization, chain in [(None, foreign), ("Bearer nope", foreign), ("Bearer nope", None)]:
        with pytest.raises(Unauthorized):
            auth.authenticate(authorization, chain)
    # without a client CA, certificates identify nobody
    assert Authenticator(tokens).authenticate(None, valid) is None


def test_field_selectors_and_human_duration() -> None:
    assert wire.parse_field_selector("spec.nodeName=n1,status.phase!=Running") == [
        ("spec.nodeName", "n1", True),
        ("status.phase", "Running", False),
    ]
    with pytest.raises(ValueError):
        wire.parse_field_selector("nope")
    assert wire.field_getter("Pod", "spec.nodeName") is not None
    assert wire.field_getter("Pod", "spec.bogus") is None
    assert [
        tables.human_duration(s)
        for s in (5, 119, 150, 600, 3600 * 5 + 60, 3600 * 30, 86400 * 3 + 3600)
    ] == ["5s", "119s", "2m30s", "10m", "5h1m", "30h", "3d1h"]


def test_protobuf_body_of_a_rolebinding() -> None:
    from control.apiserver.http import proto

    cls = proto._classes()
    rb = cls["RoleBinding"]()
    rb.metadata.name = "rb1"
    rb.metadata.namespace = ""
    s = rb.subjects.add()
    s.kind, s.name, s.apiGroup = "User", "alice", "rbac.authorization.k8s.io"
    rb.roleRef.kind, rb.roleRef.name, rb.roleRef.apiGroup = (
        "ClusterRole",
        "view",
        "rbac.authorization.k8s.io",
    )
    unk = cls["Unknown"]()
    unk.typeMeta.apiVersion, unk.typeMeta.kind = "rbac.authorization.k8s.io/v1", "RoleBinding"
    unk.raw = rb.SerializeToString()
    d = proto.decode(proto.MAGIC + unk.SerializeToString())
    assert d == {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "rb1"},
        "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}],
        "roleRef": {"kind": "ClusterRole", "name": "view", "apiGroup": "rbac.authorization.k8s.io"},
    }
    with pytest.raises(proto.ProtobufError):
        proto.decode(b"nope")


def test_a_long_list_body_is_the_same_bytes_in_pieces() -> None:
    import asyncio

    from starlette.responses import StreamingResponse

    from control.apiserver.http.handlers import LIST_PIECE, _pieces

    items = [b'{"n":%d}' % i for i in range(2 * LIST_PIECE + 7)]
    whole = b'{"items":[' + b",".join(items) + b"]}"
    resp = _pieces(b'{"items":[', items, b"]}")
    assert isinstance(resp, StreamingResponse)
    assert resp.headers["content-length"] == str(len(whole))

    async def read() -> list[bytes]:
        return [bytes(c) async for c in resp.body_iterator]  # type: ignore[arg-type]

    parts = asyncio.run(read())
    assert b"".join(parts) == whole and len(parts) == 4
    short = _pieces(b"[", items[:3], b"]")
    assert short.body == b'[{"n":0},{"n":1},{"n":2}]'
    assert _pieces(b"[", [], b"]").body == b"[]"


def test_a_metadata_only_patch_builds_the_object_the_full_validation_builds() -> None:
    """write_update's shortcut (handlers._metadata_only): when a patched body differs from
    the stored object's JSON in metadata only, the object is the stored one with the new
    metadata, equal (and encoded the same) to what validating the whole body gives;
    anything else, an Event or a refused metadata falls back to the full path."""
    from control.apiserver.http.handlers import _metadata_only
    from control.apiserver.http.resources import by_path
    from netmodel.kinds import object_from_dict

    pods = by_path("", "v1", "pods")
    assert pods is not None
    pod = object_from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "web-1",
                "namespace": "default",
                "labels": {"app": "web"},
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u1"}
                ],
                "managedFields": [{"manager": "kubectl", "operation": "Update"}],
                "resourceVersion": "7",
                "uid": "u2",
            },
            "spec": {
                "nodeName": "node-1",
                "hostname": "h",  # not modelled: kept as it came
                "containers": [
                    {"name": "c", "image": "x", "ports": [{"containerPort": 80, "name": "http"}]}
                ],
            },
            "status": {"podIP": "10.0.0.5", "phase": "Running"},
            "someExtension": {"kept": True},
        }
    )
    cur = pod.to_dict()
    for change in (
        {"metadata": {"annotations": {"a": "b"}}},
        {"metadata": {"labels": {"app": None, "tier": "front"}}},
        {"metadata": {"finalizers": ["x/y"]}},
    ):
        body = patch.merge_patch(cur, change)
        fast = _metadata_only(pods, body, cur, pod)
        full = object_from_dict(body)
        assert fast is not None
        assert fast == full
        assert fast.to_dict() == full.to_dict() == body
        assert fast.model_dump_json(by_alias=True, exclude_unset=True) == full.model_dump_json(
            by_alias=True, exclude_unset=True
        )
    spec = patch.merge_patch(cur, {"spec": {"nodeName": "node-2"}})
    assert _metadata_only(pods, spec, cur, pod) is None
    extra = patch.merge_patch(cur, {"someExtension": {"kept": False}})
    assert _metadata_only(pods, extra, cur, pod) is None
    refused = patch.merge_patch(cur, {"metadata": {"labels": ["not", "a", "map"]}})
    assert _metadata_only(pods, refused, cur, pod) is None
    events = by_path("", "v1", "events")
    assert events is not None
    assert _metadata_only(events, patch.merge_patch(cur, change), cur, pod) is None


def test_changed_leaves_are_those_of_the_full_walk() -> None:
    """managedFields' changed and removed leaves (ssa._changed_leaves, which walks only the
    top-level fields and the metadata fields that differ) are exactly what comparing the
    leaves of the two whole objects gives, on randomly mutated pods."""
    import copy
    import random

    from control.apiserver.http import ssa

    def full(new: dict, before: dict) -> tuple[set, set]:  # type: ignore[type-arg]
        a, b = ssa._leaves(new, "Pod"), ssa._leaves(before, "Pod")
        return {p for p, v in a.items() if p not in b or b[p] != v}, {p for p in b if p not in a}

    base = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "default",
            "uid": "u",
            "resourceVersion": "3",
            "labels": {"app": "web", "tier": "a"},
            "annotations": {"x": "1"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "o"}
            ],
            "finalizers": ["f/1"],
            "managedFields": [{"manager": "m", "operation": "Update", "fieldsV1": {}}],
        },
        "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}]}]},
        "status": {"phase": "Running"},
    }
    values = [None, "v", "w", {}, {"k": "v"}, [], ["f/2"], 7]
    keys = [
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "name",
        "uid",
        "managedFields",
        "generateName",
    ]
    r = random.Random(12)
    for _ in range(3000):
        objs = []
        for _side in range(2):
            d = copy.deepcopy(base)
            meta = d["metadata"]
            for _m in range(r.randint(0, 3)):
                k = r.choice(keys)
                v = r.choice(values)
                if v is None:
                    meta.pop(k, None)
                elif k in ("labels", "annotations") and isinstance(v, str):
                    m = meta.get(k)
                    meta[k] = {**(m if isinstance(m, dict) else {}), r.choice("abxy"): v}
                elif k == "ownerReferences" and isinstance(v, str):
                    meta[k] = [{"kind": "ReplicaSet", "name": v, "uid": v}]
                else:
                    meta[k] = v
            if r.random() < 0.05:  # nothing but what managedFields skip
                d["metadata"] = {k: v for k, v in meta.items() if k in ssa._SKIP_META}
            if r.random() < 0.02:
                d["metadata"] = r.choice(["text", None, {}])
            if r.random() < 0.02:  # a create: nothing before
                del d["metadata"]
            if r.random() < 0.1:
                d["spec"]["containers"][0]["image"] = r.choice("ij")
            objs.append(d)
        new, before = objs
        assert ssa._changed_leaves(new, before, "Pod") == full(new, before), (new, before)


def test_a_posted_event_keeps_the_revision_it_names_up_to_the_stores() -> None:
    # a component's Event names the revision of its subject (control.events.Recorder):
    # a write without an Event (a Lease renewal) since then must not move it
    from control.apiserver.http.converted import EventForm

    form = EventForm()
    assert form.on_create({"revision": 7}, 10) == {"revision": 7, "sequence": 11}
    for named in (None, 0, 11, True, "7"):  # none, or none that can be: the store's
        body = {} if named is None else {"revision": named}
        assert form.on_create(body, 10) == {"revision": 10, "sequence": 11}, named
