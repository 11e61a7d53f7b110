"""Shared fixtures. Kernel tests get a fresh, uniquely named namespace that is always
removed; the session fails if any svclab-prefixed namespace is left behind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

#: test data kept in the repository (tests/data/kube-proxy/PROVENANCE.md says where it is from)
DATA = Path(__file__).resolve().parent / "data"
CASES = DATA / "kube-proxy" / "cases"


@pytest.fixture
def netns() -> Iterator[str]:
    """A fresh network namespace (``svclab-t-XXXXXXXX``), removed after the test."""
    from dataplane.linux import netns as ns

    with ns.temporary("t") as name:
        yield name


@pytest.fixture(scope="session", autouse=True)
def _no_leftover_namespaces() -> Iterator[None]:
    yield
    try:
        from dataplane.linux import netns as ns
    except ImportError:  # pragma: no cover - pyroute2 missing
        return
    left = ns.list_ours()
    ns.cleanup()
    assert not left, f"tests left svclab namespaces behind: {left}"
