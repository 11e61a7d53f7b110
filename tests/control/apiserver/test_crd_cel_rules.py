"""``x-kubernetes-validations`` (CEL rules) of a CRD, through the apiserver pipeline (in
process, a memory store): evaluated with cel-python on create, update and ``/status``
writes, in kube-apiserver's wording (default ``failed rule: <rule>``, ``message``,
``messageExpression``, ``reason``, ``fieldPath``), transition rules (``oldSelf``)
only on updates, and CRDs whose rules cannot be evaluated refused with nothing stored."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import crdhelpers
import pytest
from api_helpers import make_api

from control.apiserver import APIServer
from netmodel import celrules, customresources, structural
from netmodel.errors import InvalidError
from netmodel.kinds import object_from_dict

SPEC_RULES: list[dict[str, Any]] = [
    {"rule": "self.minReplicas <= self.replicas"},
    {
        "rule": "self.replicas <= self.maxReplicas",
        "messageExpression": "'replicas ' + string(self.replicas) + ' over ' + string(self.maxReplicas)",
    },
    {"rule": "self.color != 'green'", "message": "no green", "reason": "FieldValueForbidden"},
    {"rule": "has(self.owner)", "reason": "FieldValueRequired", "fieldPath": ".owner"},
    {"rule": "self.replicas >= oldSelf.replicas", "message": "replicas may not go down"},
]

CRD: dict[str, Any] = crdhelpers.crd(
    "example.com",
    "gauges",
    "Gauge",
    [
        crdhelpers.version(
            "v1",
            {
                "spec": {
                    "type": "object",
                    "x-kubernetes-validations": SPEC_RULES,
                    "properties": {
                        "replicas": {"type": "integer"},
                        "minReplicas": {"type": "integer", "default": 0},
                        "maxReplicas": {"type": "integer", "default": 10},
                        "color": {"type": "string", "default": "red"},
                        "owner": {"type": "string"},
                        "tag": {
                            "type": "string",
                            "x-kubernetes-validations": [
                                {"rule": "self == oldSelf", "message": "is immutable"},
                                {"rule": "self.startsWith('g-')"},
                            ],
                        },
                    },
                },
                "status": {
                    "type": "object",
                    "properties": {"ready": {"type": "integer"}},
                    "x-kubernetes-validations": [{"rule": "self.ready >= 0"}],
                },
            },
            subresources={"status": {}},
        )
    ],
)


@pytest.fixture
def api() -> Iterator[APIServer]:
    with crdhelpers.installed(make_api(), copy.deepcopy(CRD)) as a:
        yield a


def _gauge(name: str = "g", **spec: Any) -> Any:
    return object_from_dict(
        {
            "apiVersion": "example.com/v1",
            "kind": "Gauge",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": 3, "owner": "me", **spec},
        }
    )


def _causes(api: APIServer, obj: Any, *, update: bool = False) -> tuple[tuple[str, str], ...]:
    with pytest.raises(structural.SchemaInvalidError) as err:
        api.update(obj) if update else api.create(obj)
    return err.value.causes


def test_a_valid_gauge_passes_every_rule(api: APIServer) -> None:
    created = api.create(_gauge(tag="g-1"))
    assert created.to_dict()["spec"]["replicas"] == 3


def test_each_failed_rule_is_a_cause_in_kubes_words(api: APIServer) -> None:
    bad = _gauge(replicas=11, minReplicas=12, color="green")
    del bad.model_extra["spec"]["owner"]  # type: ignore[index]
    causes = _causes(api, bad)
    assert causes == (
        ("spec", 'Invalid value: "object": failed rule: self.minReplicas <= self.replicas'),
        ("spec", 'Invalid value: "object": replicas 11 over 10'),
        ("spec", "Forbidden: no green"),
        ("spec.owner", "Required value: failed rule: has(self.owner)"),
    )
    assert api.store.list("gauges.example.com") == []


def test_a_rule_on_a_scalar_binds_self_to_it(api: APIServer) -> None:
    assert _causes(api, _gauge(tag="x")) == (
        ("spec.tag", "Invalid value: \"string\": failed rule: self.startsWith('g-')"),
    )


def test_transition_rules_run_on_update_only(api: APIServer) -> None:
    api.create(_gauge(replicas=5, tag="g-a"))  # oldSelf rules skipped on create
    assert _causes(api, _gauge(replicas=4, tag="g-b"), update=True) == (
        ("spec", 'Invalid value: "object": replicas may not go down'),
        ("spec.tag", 'Invalid value: "string": is immutable'),
    )
    stored = api.update(_gauge(replicas=6, tag="g-a"))
    assert stored.to_dict()["spec"]["replicas"] == 6
    # a field absent before: its transition rule has no oldSelf and is skipped
    api.create(_gauge("h", replicas=1))
    assert api.update(_gauge("h", replicas=1, tag="g-new")).to_dict()["spec"]["tag"] == "g-new"


def test_a_status_write_is_checked_by_the_status_rules(api: APIServer) -> None:
    body = api.create(_gauge()).to_dict()
    body["status"] = {"ready": -1}
    with pytest.raises(InvalidError) as err:
        api.update_status(object_from_dict(body))
    assert str(err.value) == (
        'Gauge/default/g: status: Invalid value: "object": failed rule: self.ready >= 0'
    )


def test_a_type_error_keeps_the_rules_from_running(api: APIServer) -> None:
    causes = _causes(api, _gauge(replicas="three"))
    assert causes[-1] == ("<nil>", celrules_not_checked())


def celrules_not_checked() -> str:
    return (
        'Invalid value: "null": some validation rules were not checked because the object '
        "was invalid; correct the existing errors to complete validation"
    )


def _crd_with(rules: list[dict[str, Any]]) -> Any:
    crd = copy.deepcopy(CRD)
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "x-kubernetes-validations"
    ] = rules
    return object_from_dict(crd)


RULE_AT = "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations"


def test_a_rule_that_does_not_compile_refuses_the_crd() -> None:
    a = make_api()
    with pytest.raises(InvalidError) as err:
        a.create(_crd_with([{"rule": "self.replicas > 1"}, {"rule": "self.replicas >"}]))
    assert err.value.field == f"{RULE_AT}[1].rule"
    assert err.value.reason.startswith(
        'Invalid value: apiextensions.ValidationRule{Rule:"self.replicas >", Message:"", '
    )
    assert ": compilation failed: " in err.value.reason
    assert a.store.list("CustomResourceDefinition") == []


@pytest.mark.parametrize(
    ("rule", "function"),
    [
        ("quantity(self.size).isGreaterThan(quantity('1Gi'))", "isGreaterThan, quantity"),
        ("url(self.endpoint).getScheme() == 'https'", "getScheme, url"),
        ("self.items.isSorted()", "isSorted"),
    ],
)
def test_a_kubernetes_library_function_celpy_lacks_refuses_the_crd(
    rule: str, function: str
) -> None:
    a = make_api()
    with pytest.raises(InvalidError) as err:
        a.create(_crd_with([{"rule": rule}]))
    assert err.value.field == f"{RULE_AT}[0].rule"
    assert err.value.reason.endswith(
        f"svclab cannot evaluate it: cel-python has no function {function} "
        "(a Kubernetes CEL library function)"
    )
    assert a.store.list("CustomResourceDefinition") == []


def test_bad_reason_message_expression_and_optional_old_self_are_refused() -> None:
    a = make_api()
    with pytest.raises(structural.SchemaInvalidError) as err:
        a.create(
            _crd_with(
                [
                    {"rule": "true", "reason": "FieldValueWrong"},
                    {"rule": "true", "messageExpression": "'a' +"},
                    {"rule": "self == oldSelf", "optionalOldSelf": True},
                ]
            )
        )
    fields = [f for f, _ in err.value.causes]
    assert fields == [
        f"{RULE_AT}[0].reason",
        f"{RULE_AT}[1].messageExpression",
        f"{RULE_AT}[2].optionalOldSelf",
    ]
    assert "messageExpression compilation failed" in err.value.causes[1][1]
    assert a.store.list("CustomResourceDefinition") == []


def test_an_undeclared_name_refuses_the_crd_and_macro_variables_are_declared() -> None:
    a = make_api()
    with pytest.raises(InvalidError) as err:
        a.create(_crd_with([{"rule": "self.replicas > limit"}]))
    assert err.value.field == f"{RULE_AT}[0].rule"
    assert err.value.reason.endswith(
        "compilation failed: ERROR: <input>: undeclared reference to 'limit'"
    )
    assert a.store.list("CustomResourceDefinition") == []
    ok = [{"rule": "self.all(k, k != 'x') && type(self) == map && self.replicas >= 0"}]
    a.create(_crd_with(ok))
    try:
        a.create(_gauge())
    finally:
        customresources.uninstall("gauges.example.com")


def test_field_paths_read_as_kube_appends_them() -> None:
    assert celrules._field_path(".a.b['c.d'][0]") == ".a.b[c.d][0]"
    assert celrules._field_path("a") is None


def test_a_rule_that_fails_to_evaluate_is_a_cause_naming_the_rule(api: APIServer) -> None:
    bad = _gauge()
    del bad.model_extra["spec"]["replicas"]  # type: ignore[index]
    causes = _causes(api, bad)
    assert causes[0][0] == "spec"
    assert causes[0][1].startswith('Invalid value: "object": no such member')
    assert causes[0][1].endswith(" evaluating rule: self.minReplicas <= self.replicas")
    assert "activation" not in causes[0][1]
