"""Cluster DNS on the real backend: the DNS pods' server processes and every pod's
resolv.conf.

* :class:`DnsServers` starts one :mod:`dataplane.linux.dnsserver` process per DNS pod,
  inside the pod's namespace, all answering from one zone snapshot
  (``/run/svclab/<id>/dns/zone.json``, rewritten atomically when the cluster changes;
  the servers re-read it). Pid files ``dns-<hash>.pid`` sit with the pod servers' in
  ``servers/``, so :func:`dataplane.linux.servers.kill_tracked` (teardown, cleanup after
  a crash) stops them too. Every question a server answers is logged to
  ``dns/queries.log`` (:meth:`DnsServers.queries`).
* :func:`write_resolv_conf` puts a pod's resolv.conf at ``/etc/netns/<netns>/resolv.conf``:
  ``ip netns exec`` bind-mounts the files of ``/etc/netns/<netns>/`` over ``/etc/`` in the
  mount namespace it creates, so every program it runs (``getent``, Python's
  ``socket.getaddrinfo``) reads the pod's file. :func:`remove_resolv_conf` removes the
  directory (teardown and cleanup always do).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from dataplane.linux.names import ClusterNames, short_hash
from dataplane.linux.servers import is_ours, kill_pids, read_pid, start_ready
from dataplane.linux.state import StateDir
from netmodel.dnszone import DnsZone

SERVER_SCRIPT = Path(__file__).with_name("dnsserver.py")
NETNS_ETC = Path("/etc/netns")

_children: dict[int, subprocess.Popen[bytes]] = {}


def resolv_conf_path(netns: str) -> Path:
    return NETNS_ETC / netns / "resolv.conf"


def write_resolv_conf(netns: str, text: str) -> None:
    """Write ``text`` as namespace ``netns``'s resolv.conf (atomically; unchanged text is
    not rewritten)."""
    path = resolv_conf_path(netns)
    with contextlib.suppress(FileNotFoundError):
        if path.read_text() == text:
            return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def remove_resolv_conf(netns: str) -> bool:
    """Remove ``/etc/netns/<netns>`` (True if it existed)."""
    d = NETNS_ETC / netns
    if not d.exists():
        return False
    shutil.rmtree(d, ignore_errors=True)
    return True


class DnsServers:
    """The DNS servers of one realised cluster (see the module docstring)."""

    def __init__(self, cluster_id: str) -> None:
        self.names = ClusterNames(cluster_id)
        self.state = StateDir.of(cluster_id)
        self.dir = self.state.root / "dns"
        self.zone_file = self.dir / "zone.json"
        self.log_file = self.dir / "queries.log"

    def pid_file(self, pod_key: str) -> Path:
        return self.state.servers_dir / f"dns-{short_hash(pod_key)}.pid"

    def write_zone(self, zone: DnsZone) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        text = zone.dumps()
        with contextlib.suppress(FileNotFoundError):
            if self.zone_file.read_text() == text:
                return
        tmp = self.zone_file.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.zone_file)

    def ensure(self, zone: DnsZone, pods: Mapping[str, str]) -> dict[str, int]:
        """Write the zone, start a server for each pod of ``pods`` (pod key -> logical
        namespace) that has none, stop every other DNS server of the cluster. Returns
        pod -> pid. Raises BackendError when a server does not start."""
        self.state.ensure()
        self.write_zone(zone)
        wanted = {self.pid_file(p): p for p in pods}
        stale = [f for f in self.state.servers_dir.glob("dns-*.pid") if f not in wanted]
        kill_pids(read_pid(f) for f in stale)
        for f in stale:
            f.unlink(missing_ok=True)
        out = {}
        for f, pod in sorted(wanted.items(), key=lambda kv: kv[1]):
            pid = read_pid(f)
            if pid is None or not is_ours(pid):
                pid = self._start(pod, self.names.netns(pods[pod]))
            out[pod] = pid
        reap()
        return out

    def _start(self, pod: str, netns: str) -> int:
        proc = start_ready(
            [
                sys.executable,
                "-P",  # not the script's directory first: its dns*.py names
                str(SERVER_SCRIPT),
                netns,
                str(self.zone_file),
                pod,
                str(self.log_file),
            ],
            self.dir / "server.log",
            f"DNS server of pod {pod}",
        )
        _children[proc.pid] = proc
        self.pid_file(pod).write_text(f"{proc.pid}\n")
        return proc.pid

    def queries(self) -> list[str]:
        """The questions answered so far, one ``qname qtype rcode proto`` line each."""
        try:
            return self.log_file.read_text().splitlines()
        except FileNotFoundError:
            return []


def reap() -> None:
    """Wait for the DNS servers this process started that have exited (no zombies)."""
    for pid, proc in list(_children.items()):
        if proc.poll() is not None:
            _children.pop(pid, None)


__all__ = [
    "DnsServers",
    "DnsZone",
    "remove_resolv_conf",
    "resolv_conf_path",
    "write_resolv_conf",
]
