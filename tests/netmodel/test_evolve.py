"""``K8sModel.evolve`` is pydantic's ``model_copy(update=...)``, made directly."""

from __future__ import annotations

from netmodel.objects import ObjectMeta, Pod


def test_evolve_is_model_copy_with_update() -> None:
    pod = Pod.model_validate(
        {"metadata": {"name": "p", "labels": {"a": "b"}, "finalizers": ["x"]}, "spec": {}}
    )
    for changes in (
        {"name": "q"},
        {"name": "q", "namespace": "n", "resource_version": "7"},
        {"name": "q", "not_a_field": 1},  # an unknown name becomes an extra field
    ):
        a, b = pod.metadata.evolve(**changes), pod.metadata.model_copy(update=changes)
        assert type(a) is ObjectMeta
        assert a.__dict__ == b.__dict__
        assert a.__pydantic_extra__ == b.__pydantic_extra__
        assert a.__pydantic_fields_set__ == b.__pydantic_fields_set__
        assert a.to_dict() == b.to_dict()
    assert pod.metadata.model_extra == {"finalizers": ["x"]}  # the original is untouched
    assert pod.metadata.name == "p"
    moved = pod.evolve(metadata=pod.metadata.evolve(name="r"))
    assert moved.to_dict() == pod.model_copy(update={"metadata": moved.metadata}).to_dict()
