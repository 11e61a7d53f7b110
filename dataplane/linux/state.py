"""Where a realised cluster keeps its runtime state (under ``/run``, so a reboot clears
it, like the namespaces themselves)::

    /run/svclab/<cluster-id>/
        cluster.json            logical -> kernel namespace names, overlay, CNI mode
        persistent              marker: a kept cluster (a dev cluster), see cleanup
        ipam/                   host-local's dataDir (per cluster: IPAM state never leaks)
        cni/<pod-hash>.json     each pod's CNI ADD result (libcni's result cache)
        servers/supervisor.pid  the pod-server supervisor
        servers/supervisor.sock its control socket
        servers/host-<hash>.pid one per pod-server process (one per node)
        servers/host-<hash>.pods  the pods that process answers for (JSON list)
        etc/<ns>_<pod>/         the pod's resolv.conf and hosts, as kubelet writes them
                                (bind-mounted over /etc for an exec: dataplane.linux.sandbox)
        logs/<ns>_<pod>.log     a pod server's access log, kubelet's CRI format (one
                                record a line: ``<RFC3339Nano UTC> stdout F <text>``)
    /run/svclab/_owners/<netns>  "<pid> <start time>" of the process that created it

:func:`cleanup` in :mod:`dataplane.linux.realize` walks every directory here.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dataplane.linux.names import CLUSTER_ID_RE, check_cluster_id, short_hash

RUN_DIR = Path(os.environ.get("SVCLAB_RUN_DIR", "/run/svclab"))
OWNERS_DIR = RUN_DIR / "_owners"  # not a valid cluster id: never taken for a state dir


@dataclass(frozen=True, slots=True)
class StateDir:
    """Paths of one cluster's state directory (nothing is created until asked)."""

    root: Path

    @classmethod
    def of(cls, cluster_id: str) -> StateDir:
        return cls(RUN_DIR / check_cluster_id(cluster_id))

    @property
    def cluster_file(self) -> Path:
        return self.root / "cluster.json"

    @property
    def ipam_dir(self) -> Path:
        return self.root / "ipam"

    @property
    def cni_dir(self) -> Path:
        return self.root / "cni"

    @property
    def servers_dir(self) -> Path:
        return self.root / "servers"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    def pod_log(self, pod_key: str) -> Path:
        """The access log of pod ``ns/name``'s server (``<ns>_<name>.log``: namespaces
        and pod names are DNS names, without ``_``, so the name is unambiguous)."""
        namespace, _, name = pod_key.partition("/")
        return self.logs_dir / f"{namespace}_{name}.log"

    def pod_etc(self, pod_key: str) -> Path:
        """The directory of pod ``ns/name``'s ``resolv.conf`` and ``hosts``."""
        namespace, _, name = pod_key.partition("/")
        return self.root / "etc" / f"{namespace}_{name}"

    def cni_result(self, pod_key: str) -> Path:
        return self.cni_dir / f"{short_hash(pod_key)}.json"

    @property
    def persistent_marker(self) -> Path:
        """Present for a cluster realised with ``persistent=True``: only a cleanup that
        names it (or a forced one) removes it."""
        return self.root / "persistent"

    @property
    def supervisor_pid(self) -> Path:
        return self.servers_dir / "supervisor.pid"

    @property
    def supervisor_sock(self) -> Path:
        return self.servers_dir / "supervisor.sock"

    def ensure(self) -> StateDir:
        for d in (self.root, self.ipam_dir, self.cni_dir, self.servers_dir):
            d.mkdir(parents=True, exist_ok=True)
        return self

    def write_json(self, path: Path, value: Any) -> None:
        """Atomic write (temp file + rename) so a killed run never leaves half a file."""
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(value, indent=1, sort_keys=True))
        tmp.replace(path)

    def read_json(self, path: Path) -> Any:
        try:
            return json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None


def all_state_dirs() -> list[Path]:
    """Every cluster state directory present (for cleanup)."""
    if not RUN_DIR.is_dir():
        return []
    return sorted(p for p in RUN_DIR.iterdir() if p.is_dir() and CLUSTER_ID_RE.match(p.name))
