"""Shared fixtures. Kernel tests get a fresh, uniquely named namespace that is always
removed; the session fails if any svclab-prefixed namespace is left behind."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Property tests state what must hold, not how fast: a per-example deadline is a timing
# assertion, and on a loaded machine it fails correct code. Tests that set their own
# settings keep them (they override this profile's fields they name).
settings.register_profile("svclab", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("svclab")

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
    """Fails the session if tests left svclab namespaces behind: those no other live
    process holds, and also the namespaces (and /run/svclab state) of persistent (kept)
    clusters this test process created, which the ordinary leak check leaves alone."""
    yield
    try:
        from dataplane.linux import netns as ns
        from dataplane.linux import nsenter
    except ImportError:  # pragma: no cover - pyroute2 missing
        return
    left = ns.list_ours()
    kept = [n for n in ns.list_ours(include_held=True) if nsenter.owner(n) == os.getpid()]
    clusters = sorted({n[len(ns.PREFIX) :].split("-", 1)[0] for n in (*left, *kept)})
    if clusters:  # their pod servers and /run/svclab state go too, not only namespaces
        from dataplane.linux import realize
        from dataplane.linux.names import CLUSTER_ID_RE

        for cid in clusters:
            if CLUSTER_ID_RE.match(cid):
                realize.cleanup(cid)
    ns.cleanup()
    assert not left, f"tests left svclab namespaces behind: {left}"
    assert not kept, f"tests left persistent clusters behind: {clusters} ({kept})"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under ``CI=true`` a kernel test that would skip is an error: CI runs as root, and
    a skipped kernel test there means the kernel side went untested."""
    outcome = yield
    rep = outcome.get_result()  # type: ignore[attr-defined]
    if (
        rep.skipped
        and not hasattr(rep, "wasxfail")
        and os.environ.get("CI") == "true"
        and item.get_closest_marker("kernel") is not None
    ):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        rep.outcome = "failed"
        rep.longrepr = f"kernel test skipped under CI=true (kernel tests must run): {reason}"
