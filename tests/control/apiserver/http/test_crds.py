"""CustomResourceDefinitions and their custom resources, driven by the real kubectl and
the official kubernetes Python client (ApiextensionsV1Api, CustomObjectsApi) against a
real ``svclab serve``: a CRD with a structural schema is registered at run time
(discovery, OpenAPI and ``kubectl explain`` see it), its objects are pruned, defaulted
and validated as kube-apiserver does it (422 with causes naming the field), its status
and scale subresources and printer columns work, strategic merge is refused, and
deleting the CRD deletes its objects. One server for the module; the restart test has
its own."""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import crdhelpers
import pytest
import yaml
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from serving import Served

pytestmark = pytest.mark.slow

GROUP, VERSION, PLURAL = "example.com", "v1", "widgets"

CRD: dict[str, Any] = crdhelpers.crd(
    GROUP,
    PLURAL,
    "Widget",
    [
        crdhelpers.version(
            VERSION,
            {
                "spec": {
                    "type": "object",
                    "required": ["color"],
                    "properties": {
                        "replicas": {
                            "type": "integer",
                            "minimum": 0,
                            "maximum": 10,
                            "default": 1,
                            "description": "How many widgets to make.",
                        },
                        "color": {"type": "string", "enum": ["red", "blue"]},
                        "port": {"x-kubernetes-int-or-string": True},
                        "size": {"type": "string", "pattern": "^[0-9]+(Mi|Gi)$"},
                        "note": {"type": "string", "nullable": True},
                        "tags": {"type": "array", "items": {"type": "string"}},
                        "limits": {
                            "type": "object",
                            "default": {},
                            "properties": {
                                "cpu": {"type": "integer", "default": 2},
                            },
                        },
                        "extra": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        },
                    },
                },
                "status": {
                    "type": "object",
                    "properties": {
                        "replicas": {"type": "integer"},
                        "selector": {"type": "string"},
                    },
                },
            },
            subresources={
                "status": {},
                "scale": {
                    "specReplicasPath": ".spec.replicas",
                    "statusReplicasPath": ".status.replicas",
                    "labelSelectorPath": ".status.selector",
                },
            },
            additionalPrinterColumns=[
                {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                {"name": "Color", "type": "string", "jsonPath": ".spec.color"},
                {"name": "Size", "type": "string", "jsonPath": ".spec.size", "priority": 1},
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            ],
        )
    ],
    singular="widget",
    shortNames=["wd"],
)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with crdhelpers.running(Served(tmp_path_factory.mktemp("serve") / "state")) as s:
        yield s


@pytest.fixture(scope="module")
def api(srv: Served) -> client.ApiClient:
    return config.new_client_from_config(str(srv.kubeconfig))


@pytest.fixture(scope="module")
def crd(srv: Served, api: client.ApiClient) -> dict[str, Any]:
    """The CRD, created through kubectl apply and Established."""
    crdhelpers.apply_crd(srv, CRD)
    got: dict[str, Any] = (
        client.ApiextensionsV1Api(api)
        .read_custom_resource_definition("widgets.example.com")
        .to_dict()
    )
    return got


@pytest.fixture(scope="module")
def co(api: client.ApiClient, crd: dict[str, Any]) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def _widget(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"color": "red", **spec},
    }


def _create(co: client.CustomObjectsApi, body: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = co.create_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, body
    )
    return out


def _refused(co: client.CustomObjectsApi, body: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(ApiException) as ei:
        _create(co, body)
    assert ei.value.status == 422, ei.value.body
    st: dict[str, Any] = json.loads(ei.value.body)
    assert st["reason"] == "Invalid"
    return st


def test_the_crd_gets_kube_apiservers_status_and_is_discovered(
    srv: Served, crd: dict[str, Any]
) -> None:
    status = crd["status"]
    assert status["accepted_names"]["kind"] == "Widget"
    assert status["accepted_names"]["list_kind"] == "WidgetList"
    assert status["stored_versions"] == ["v1"]
    conds = {c["type"]: c for c in status["conditions"]}
    assert conds["NamesAccepted"]["status"] == "True"
    assert conds["NamesAccepted"]["reason"] == "NoConflicts"
    assert conds["Established"]["status"] == "True"
    assert conds["Established"]["reason"] == "InitialNamesAccepted"
    assert crd["spec"]["conversion"]["strategy"] == "None"  # kube's default
    lines = srv.kubectl("api-resources", "--api-group=example.com").stdout.splitlines()
    assert lines[1].split() == ["widgets", "wd", "example.com/v1", "true", "Widget"]
    code, doc, _ = srv.raw("GET", "/apis/example.com/v1")
    assert code == 200 and isinstance(doc, dict)
    res = {r["name"]: r for r in doc["resources"]}
    assert set(res) == {"widgets", "widgets/status", "widgets/scale"}
    assert res["widgets/scale"]["kind"] == "Scale"


def test_kubectl_explain_reads_the_crds_schema(srv: Served, crd: dict[str, Any]) -> None:
    out = srv.kubectl("explain", "widget.spec.replicas").stdout
    assert "KIND:       Widget" in out and "GROUP:      example.com" in out
    assert "replicas <integer>" in out
    assert "How many widgets to make." in out


def test_a_valid_widget_is_pruned_and_defaulted(co: client.CustomObjectsApi) -> None:
    got = _create(co, _widget("w-valid", port="http", junk=1, extra={"anything": [1, {"b": 2}]}))
    spec = got["spec"]
    assert "junk" not in spec  # pruned: the schema does not specify it
    assert spec["extra"] == {"anything": [1, {"b": 2}]}  # preserve-unknown-fields
    assert spec["port"] == "http"  # int-or-string
    assert spec["replicas"] == 1  # default
    assert spec["limits"] == {"cpu": 2}  # a default object, itself defaulted
    assert got["metadata"]["generation"] == 1
    stored = co.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "w-valid")
    assert stored["spec"] == spec
    co.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "w-valid")


def test_invalid_widgets_get_422_with_the_field_named(co: client.CustomObjectsApi) -> None:
    st = _refused(co, _widget("w-type", replicas="three"))
    assert st["message"] == (
        'Widget.example.com "w-type" is invalid: spec.replicas: Invalid value: "string": '
        'spec.replicas in body must be of type integer: "string"'
    )
    assert st["details"]["causes"][0]["field"] == "spec.replicas"
    assert st["details"]["group"] == GROUP and st["details"]["kind"] == "Widget"
    body = _widget("w-required")
    del body["spec"]["color"]
    st = _refused(co, body)
    assert st["details"]["causes"][0] == {
        "reason": "FieldValueRequired",
        "message": "Required value",
        "field": "spec.color",
    }
    st = _refused(co, _widget("w-enum", color="pink"))
    assert st["details"]["causes"][0]["message"] == (
        'Unsupported value: "pink": supported values: "red", "blue"'
    )
    st = _refused(co, _widget("w-max", replicas=11))
    assert st["details"]["causes"][0]["message"] == (
        "Invalid value: 11: spec.replicas in body should be less than or equal to 10"
    )
    st = _refused(co, _widget("w-pattern", size="big"))
    assert st["details"]["causes"][0]["message"] == (
        "Invalid value: \"big\": spec.size in body should match '^[0-9]+(Mi|Gi)$'"
    )
    st = _refused(co, _widget("w-items", tags=["a", 2]))
    assert st["details"]["causes"][0]["field"] == "spec.tags[1]"
    st = _refused(co, _widget("w-ios", port=True))
    assert st["details"]["causes"][0]["message"] == (
        'Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean"'
    )
    assert _create(co, _widget("w-null", note=None))["spec"]["note"] is None  # nullable
    co.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "w-null")
    listed = co.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
    assert [i["metadata"]["name"] for i in listed["items"]] == []  # nothing refused stored


def test_kubectl_refuses_a_widget_in_kubes_words(srv: Served, crd: dict[str, Any]) -> None:
    out = srv.kubectl(
        "apply", "-f", "-", input=yaml.safe_dump(_widget("bad", color="pink")), check=False
    )
    assert out.returncode == 1
    assert out.stderr.strip() == (
        'The Widget "bad" is invalid: spec.color: Unsupported value: "pink": '
        'supported values: "red", "blue"'
    )
    strict = srv.kubectl(
        "apply", "-f", "-", input=yaml.safe_dump(_widget("bad", junk=1)), check=False
    )
    assert 'strict decoding error: unknown field "spec.junk"' in strict.stderr


def test_status_subresource(co: client.CustomObjectsApi) -> None:
    body = _widget("w-status")
    body["status"] = {"replicas": 9}
    got = _create(co, body)
    assert "status" not in got  # create through the main endpoint takes no status
    got = co.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        "default",
        PLURAL,
        "w-status",
        {"status": {"replicas": 4}, "spec": {"color": "blue"}},
    )
    assert got["status"] == {"replicas": 4}
    assert got["spec"]["color"] == "red"  # /status writes nothing but the status
    assert got["metadata"]["generation"] == 1
    got = co.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        "default",
        PLURAL,
        "w-status",
        {"status": {"replicas": 7}, "spec": {"color": "blue"}},
    )
    assert got["spec"]["color"] == "blue"
    assert got["status"] == {"replicas": 4}  # the main endpoint keeps the stored status
    assert got["metadata"]["generation"] == 2


def test_scale_subresource(srv: Served, co: client.CustomObjectsApi) -> None:
    _create(co, _widget("w-scale", replicas=2))
    co.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        "default",
        PLURAL,
        "w-scale",
        {"status": {"replicas": 2, "selector": "app=w"}},
    )
    assert srv.kubectl("scale", "widget", "w-scale", "--replicas=5").stdout.strip() == (
        "widget.example.com/w-scale scaled"
    )
    scale = co.get_namespaced_custom_object_scale(GROUP, VERSION, "default", PLURAL, "w-scale")
    assert scale["kind"] == "Scale" and scale["apiVersion"] == "autoscaling/v1"
    assert scale["spec"] == {"replicas": 5}
    assert scale["status"] == {"replicas": 2, "selector": "app=w"}
    got = co.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "w-scale")
    assert got["spec"]["replicas"] == 5
    out = srv.kubectl("scale", "widget", "w-scale", "--replicas=11", check=False)
    assert "spec.replicas in body should be less than or equal to 10" in out.stderr


def test_kubectl_get_prints_the_printer_columns(srv: Served, co: client.CustomObjectsApi) -> None:
    _create(co, _widget("w-cols", replicas=3, size="1Gi"))
    lines = srv.kubectl("get", "widgets", "w-cols").stdout.splitlines()
    assert lines[0].split() == ["NAME", "REPLICAS", "COLOR", "AGE"]
    assert lines[1].split()[:3] == ["w-cols", "3", "red"]
    wide = srv.kubectl("get", "wd", "w-cols", "-o", "wide").stdout.splitlines()
    assert wide[0].split() == ["NAME", "REPLICAS", "COLOR", "SIZE", "AGE"]
    assert wide[1].split()[:4] == ["w-cols", "3", "red", "1Gi"]


def test_patch_merge_json_and_strategic_refused(srv: Served, co: client.CustomObjectsApi) -> None:
    _create(co, _widget("w-patch"))
    srv.kubectl("patch", "widget", "w-patch", "--type=merge", "-p", '{"spec":{"color":"blue"}}')
    srv.kubectl(
        "patch",
        "widget",
        "w-patch",
        "--type=json",
        "-p",
        '[{"op":"replace","path":"/spec/replicas","value":4}]',
    )
    got = co.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "w-patch")
    assert (got["spec"]["color"], got["spec"]["replicas"]) == ("blue", 4)
    code, st, _ = srv.raw(
        "PATCH",
        "/apis/example.com/v1/namespaces/default/widgets/w-patch",
        {"spec": {"color": "red"}},
        content_type="application/strategic-merge-patch+json",
    )
    assert code == 415 and isinstance(st, dict)
    assert st["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )


def test_server_side_apply(srv: Served, co: client.CustomObjectsApi) -> None:
    doc = yaml.safe_dump(_widget("w-ssa", replicas=2))
    out = srv.kubectl("apply", "--server-side", "-f", "-", input=doc)
    assert out.stdout.strip() == "widget.example.com/w-ssa serverside-applied"
    got = co.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "w-ssa")
    assert got["spec"]["replicas"] == 2 and got["spec"]["limits"] == {"cpu": 2}
    managers = {m["manager"] for m in got["metadata"]["managedFields"]}
    assert "kubectl" in managers


def test_a_watch_sees_custom_resources(co: client.CustomObjectsApi) -> None:
    seen: list[tuple[str, str]] = []
    w = watch.Watch()

    def run() -> None:
        for ev in w.stream(
            co.list_namespaced_custom_object,
            GROUP,
            VERSION,
            "default",
            PLURAL,
            timeout_seconds=20,
        ):
            name = ev["object"]["metadata"]["name"]
            if name == "w-watch":
                seen.append((ev["type"], ev["object"]["spec"]["color"]))
                if ev["type"] == "DELETED":
                    w.stop()

    t = threading.Thread(target=run)
    t.start()
    time.sleep(1)
    _create(co, _widget("w-watch"))
    co.patch_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "w-watch", {"spec": {"color": "blue"}}
    )
    co.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "w-watch")
    t.join(25)
    assert seen == [("ADDED", "red"), ("MODIFIED", "blue"), ("DELETED", "blue")]


def _crd_error(ext: client.ApiextensionsV1Api, body: dict[str, Any]) -> str:
    with pytest.raises(ApiException) as ei:
        ext.create_custom_resource_definition(body)
    assert ei.value.status == 422, ei.value.body
    cause = json.loads(ei.value.body)["details"]["causes"][0]
    return f"{cause['field']}: {cause['message']}"


def _gadget() -> dict[str, Any]:
    body = copy.deepcopy(CRD)
    body["metadata"]["name"] = "gadgets.example.com"
    body["spec"]["names"] = {"plural": "gadgets", "kind": "Gadget"}
    return body


def test_invalid_crds_are_refused_in_kubes_words(
    api: client.ApiClient, crd: dict[str, Any]
) -> None:
    ext = client.ApiextensionsV1Api(api)
    body = _gadget()
    body["metadata"]["name"] = "gadgets.example.org"
    assert _crd_error(ext, body) == (
        'metadata.name: Invalid value: "gadgets.example.org": must be spec.names.plural+"."+spec.group'
    )
    body = _gadget()
    del body["spec"]["versions"][0]["schema"]
    assert _crd_error(ext, body) == (
        "spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required"
    )
    body = _gadget()
    body["spec"]["versions"].append({**body["spec"]["versions"][0], "name": "v2"})
    assert _crd_error(ext, body) == (
        "spec.versions: Invalid value: [v1, v2]: must have exactly one version marked as "
        "storage version"
    )
    body = _gadget()
    props = body["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    props["spec"]["properties"]["untyped"] = {"description": "no type"}
    assert _crd_error(ext, body) == (
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[untyped].type: "
        "Required value: must not be empty for specified object fields"
    )
    body = _gadget()
    body["spec"]["scope"] = "Global"
    assert _crd_error(ext, body) == (
        'spec.scope: Unsupported value: "Global": supported values: "Cluster", "Namespaced"'
    )
    listed = ext.list_custom_resource_definition().items
    assert [c.metadata.name for c in listed] == ["widgets.example.com"]


def test_a_kind_without_its_crd_is_not_found(srv: Served, crd: dict[str, Any]) -> None:
    gadget = {"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}}
    out = srv.kubectl("apply", "-f", "-", input=yaml.safe_dump(gadget), check=False)
    assert out.returncode == 1
    assert 'no matches for kind "Gadget" in version "example.com/v1"' in out.stderr
    code, _, _ = srv.raw("GET", "/apis/example.com/v1/gadgets")
    assert code == 404


def test_deleting_the_crd_deletes_its_objects(srv: Served, co: client.CustomObjectsApi) -> None:
    """The last test of the module: the CRD goes, its objects with it."""
    _create(co, _widget("w-doomed"))
    assert "w-doomed" in srv.kubectl("get", "widgets", "-o", "name").stdout
    srv.kubectl("delete", "crd", "widgets.example.com")
    out = srv.kubectl("get", "widgets", check=False)
    assert out.returncode == 1  # kubectl's discovery cache may still name the resource:
    assert "the server could not find the requested resource" in out.stderr  # it is gone
    code, _, _ = srv.raw("GET", "/apis/example.com/v1/namespaces/default/widgets")
    assert code == 404
    code, _, _ = srv.raw("GET", "/apis/example.com/v1")
    assert code == 404  # the group is no more served
    code, groups, _ = srv.raw("GET", "/apis")
    assert isinstance(groups, dict)
    assert "example.com" not in {g["name"] for g in groups["groups"]}
    srv.kubectl("apply", "-f", "-", input=yaml.safe_dump(CRD))
    srv.kubectl("wait", "--for=condition=Established", "crd/widgets.example.com")
    assert srv.kubectl("get", "widgets", "-o", "name").stdout == ""  # none came back


def test_a_restart_serves_the_stored_crds_and_their_objects(tmp_path: Path) -> None:
    s = Served(tmp_path / "state")
    try:
        s.start()
        s.kubectl("apply", "-f", "-", input=yaml.safe_dump(CRD))
        s.kubectl("apply", "-f", "-", input=yaml.safe_dump(_widget("kept", replicas=3)))
        s.stop()
        s.start()
        out = s.kubectl("get", "widgets", "kept", "-o", "json").stdout
        assert json.loads(out)["spec"]["replicas"] == 3
        assert s.kubectl("get", "wd").stdout.splitlines()[0].split()[:3] == [
            "NAME",
            "REPLICAS",
            "COLOR",
        ]
    finally:
        s.stop()


def test_svclab_apply_takes_a_crd_and_its_objects(tmp_path: Path) -> None:
    """``svclab apply -f`` of a file holding the CRD and then its objects; a later apply
    of objects alone (the CRD is stored); an object whose CRD is unknown is refused in
    kube's words, naming the file and document."""
    s = Served(tmp_path / "state")
    both = tmp_path / "both.yaml"
    both.write_text(yaml.safe_dump_all([CRD, _widget("first", replicas=2)]))
    out = s.svclab("apply", "-f", str(both))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-2:] == [
        "customresourcedefinition/widgets.example.com created",
        "widget/first created",
    ]
    later = tmp_path / "later.yaml"
    later.write_text(yaml.safe_dump(_widget("second", junk=1)))
    out = s.svclab("apply", "-f", str(later))
    assert out.returncode == 1
    assert out.stderr.strip() == (
        f"error: {later} (document 1): Widget/second: spec.junk: unknown field"
    )
    later.write_text(yaml.safe_dump(_widget("second", color="pink")))
    out = s.svclab("apply", "-f", str(later))
    assert out.stderr.strip() == (
        f"error: {later} (document 1): Widget/default/second: spec.color: Unsupported value: "
        '"pink": supported values: "red", "blue"'
    )
    later.write_text(yaml.safe_dump(_widget("second")))
    out = s.svclab("apply", "-f", str(later))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "widget/second created"
    gadget = tmp_path / "gadget.yaml"
    gadget.write_text(yaml.safe_dump({**_widget("g"), "kind": "Gadget"}))
    out = s.svclab("apply", "-f", str(gadget))
    assert out.returncode == 1
    assert out.stderr.strip() == (
        f'error: {gadget} (document 1): Gadget/g: kind: no matches for kind "Gadget" in '
        'version "example.com/v1" (ensure CRDs are installed first)'
    )
    s.start()
    try:
        names = s.kubectl("get", "widgets", "-o", "name").stdout.split()
        assert names == ["widget.example.com/first", "widget.example.com/second"]
    finally:
        s.stop()


def test_a_dump_holding_a_crd_and_its_objects_skips_nothing() -> None:
    """``kubectl get crd,widgets,nodes -o yaml``: the objects of a CRD in the dump are
    modelled kinds, not skipped."""
    from netmodel import customresources
    from netmodel.manifests import load_text

    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "resourceVersion": "1"},
        "spec": {"podCIDR": "10.244.0.0/24"},
    }
    widget = _widget("w1")
    widget["metadata"].update(namespace="default", resourceVersion="5", uid="u-1")
    dump = {"apiVersion": "v1", "kind": "List", "items": [node, CRD, widget]}
    try:
        got = load_text(yaml.safe_dump(dump), source="dump.yaml")
        assert got.skipped == ()
        assert [(o.kind, o.name) for o in got.objects] == [
            ("Node", "n1"),
            ("CustomResourceDefinition", "widgets.example.com"),
            ("Widget", "w1"),
        ]
        assert got.objects[-1].store_kind == "widgets.example.com"
    finally:
        customresources.uninstall("widgets.example.com")
