"""Real etcd for the control-plane tests: one member for the whole session (tests wipe
what they use), started on first use and always stopped."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from etcd_procs import ETCD, EtcdCluster, etcd_cluster


@pytest.fixture(scope="session")
def etcd_member() -> Iterator[EtcdCluster]:
    """A one-member etcd shared by the session; :meth:`EtcdCluster.wipe` empties it."""
    if not os.path.exists(ETCD):
        pytest.fail("etcd is not installed (scripts/install installs etcd-server)")
    with etcd_cluster(1) as c:
        yield c
