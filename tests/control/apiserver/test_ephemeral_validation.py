"""Ephemeral containers as kube-apiserver validates them (control.apiserver.ephemeral):
the checks of any pod spec, the refusal on create, and the subresource's rule that
existing ones are neither removed nor changed, with upstream's wording."""

from __future__ import annotations

from typing import Any

import pytest

from control.apiserver import ephemeral, strategy
from control.apiserver.validation import Problems
from netmodel.cluster import ClusterSpec
from netmodel.errors import InvalidError
from netmodel.objects import Container, Pod


def _pod(eph: list[dict[str, Any]]) -> Pod:
    return Pod.model_validate(
        {
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "containers": [{"name": "web", "image": "agnhost"}],
                "initContainers": [{"name": "init", "image": "busybox"}],
                "ephemeralContainers": eph,
            },
        }
    )


def _spec_error(eph: list[dict[str, Any]]) -> str:
    with pytest.raises(InvalidError) as e:
        ephemeral.validate_ephemeral_containers(_pod(eph).spec, "spec", Problems('Pod "web"'))
    return f"{e.value.field}: {e.value.reason}"


def test_a_valid_ephemeral_container_passes() -> None:
    ok = [{"name": "dbg", "image": "busybox", "targetContainerName": "web", "resources": {}}]
    ephemeral.validate_ephemeral_containers(_pod(ok).spec, "spec", Problems('Pod "web"'))


def test_spec_checks_with_upstream_wording() -> None:
    assert _spec_error([{"name": "web", "image": "b"}]) == (
        'spec.ephemeralContainers[0].name: Duplicate value: "web"'
    )
    assert _spec_error([{"name": "init", "image": "b"}]) == (
        'spec.ephemeralContainers[0].name: Duplicate value: "init"'
    )
    two = [{"name": "d", "image": "b"}, {"name": "d", "image": "b"}]
    assert _spec_error(two) == 'spec.ephemeralContainers[1].name: Duplicate value: "d"'
    assert _spec_error([{"name": "d"}]) == "spec.ephemeralContainers[0].image: Required value"
    assert _spec_error([{"name": "d", "image": "b", "targetContainerName": "nope"}]) == (
        'spec.ephemeralContainers[0].targetContainerName: Not found: "nope"'
    )
    forbidden = "Forbidden: cannot be set for an Ephemeral Container"
    assert _spec_error([{"name": "d", "image": "b", "ports": [{"containerPort": 80}]}]) == (
        f"spec.ephemeralContainers[0].ports: {forbidden}"
    )
    assert _spec_error([{"name": "d", "image": "b", "resources": {"requests": {"cpu": "1"}}}]) == (
        f"spec.ephemeralContainers[0].resources: {forbidden}"
    )
    probe = {"tcpSocket": {"port": 80}}
    assert _spec_error([{"name": "d", "image": "b", "readinessProbe": probe}]) == (
        f"spec.ephemeralContainers[0].readinessProbe: {forbidden}"
    )
    mount = {"name": "v", "mountPath": "/v", "subPath": "x"}
    assert _spec_error([{"name": "d", "image": "b", "volumeMounts": [mount]}]) == (
        f"spec.ephemeralContainers[0].volumeMounts[0].subPath: {forbidden}"
    )


def test_ephemeral_containers_cannot_be_set_on_create() -> None:
    pod = _pod([{"name": "dbg", "image": "busybox"}])
    with pytest.raises(InvalidError) as e:
        strategy.validate(pod, ClusterSpec())
    assert (e.value.field, e.value.reason) == (
        "spec.ephemeralContainers",
        "Forbidden: cannot be set on create",
    )


def _c(**kw: Any) -> Container:
    return Container.model_validate({"name": "dbg", "image": "busybox", **kw})


def test_existing_ones_may_not_be_removed_or_changed() -> None:
    old = [_c()]
    ephemeral.validate_update([_c(), _c(name="two")], old, Problems('Pod "web"'))  # added
    with pytest.raises(InvalidError) as e:
        ephemeral.validate_update([_c(name="two")], old, Problems('Pod "web"'))
    assert (e.value.field, e.value.reason) == (
        "spec.ephemeralContainers",
        'Forbidden: existing ephemeral containers "dbg" may not be removed\n',
    )
    with pytest.raises(InvalidError) as e:
        ephemeral.validate_update([_c(image="alpine")], old, Problems('Pod "web"'))
    assert e.value.field == "spec.ephemeralContainers[dbg]"
    assert e.value.reason.startswith(
        'Forbidden: existing ephemeral containers "dbg" may not be changed\n'
    )
    assert "image: 'busybox' -> 'alpine'" in e.value.reason


def test_only_the_ephemeral_containers_of_a_request_are_kept() -> None:
    old = _pod([]).to_dict()
    new = _pod([{"name": "dbg", "image": "busybox"}]).to_dict()
    new["metadata"]["labels"] = {"sneaked": "in"}
    new["spec"]["containers"][0]["image"] = "evil"
    kept = ephemeral.keep_only_ephemeral(new, old)
    assert kept["spec"]["ephemeralContainers"] == [{"name": "dbg", "image": "busybox"}]
    assert kept["spec"]["containers"] == old["spec"]["containers"]
    assert "labels" not in kept["metadata"]
