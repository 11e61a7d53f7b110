"""The public API: one signature for every mode."""

from __future__ import annotations

import pytest
from proxy_builders import CASES, endpoint, fake_config, service, slice_

from dataplane.proxy import (
    MODES,
    IptablesRender,
    IpvsRender,
    NftablesRender,
    RenderedRules,
    build_snapshot,
    render,
    render_objects,
)
from dataplane.proxy.cases import load_case


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_renders_through_one_signature(mode: str) -> None:
    case = load_case(CASES / "TestOverallIPTablesRules.yaml")
    out: RenderedRules = render_objects(
        mode,  # type: ignore[arg-type]
        case.services,
        case.endpointslices,
        case.node_config,
    )
    assert out.restore_input and out.save_text
    assert "172.30.0.41" in out.restore_input + out.save_text
    kind = {"iptables": IptablesRender, "ipvs": IpvsRender, "nftables": NftablesRender}[mode]
    assert isinstance(out, kind)


def test_renders_are_deterministic_and_pure() -> None:
    cfg = fake_config()
    svcs = [service("ns1", f"s{i}", f"172.30.0.{i}") for i in range(1, 6)]
    slices = [slice_("ns1", f"s{i}", [endpoint(f"10.0.0.{i}")]) for i in range(1, 6)]
    for mode in MODES:
        a = render(mode, build_snapshot(svcs, slices, cfg), cfg)
        b = render(mode, build_snapshot(list(reversed(svcs)), slices[::-1], cfg), cfg)
        assert a.restore_input == b.restore_input
        assert a.save_text == b.save_text


def test_unknown_mode_is_refused() -> None:
    cfg = fake_config()
    with pytest.raises(ValueError, match="unknown proxy mode 'userspace'"):
        render("userspace", build_snapshot([], [], cfg), cfg)  # type: ignore[arg-type]
