"""Pods through the real CNI plugins, exactly as a container runtime calls them.

A runtime runs a plugin in *its own* (host) network namespace and tells it the
container's namespace by path. In svclab the "host" of a pod is its node namespace, so
each plugin is started from a thread that has entered the node's network namespace
(:func:`dataplane.linux.nsenter.entered`; a new process inherits the namespaces of the
thread that forks it), exactly as ``ip netns exec <node-ns>`` would run it but without
that extra process per call (1,000 pods meant 2,000 of them). The plugin shares our
mount namespace, so ``CNI_NETNS`` (``/var/run/netns/...``) resolves, and it reaches the
node's ``/proc/sys/net`` (which follows the opener's network namespace). It does not
get the ``/sys`` that ``ip netns exec`` remounts for the node: the plugins read no
``/sys/class/net`` (checked with strace on containernetworking-plugins 1.x, Debian;
they use netlink and ``/proc/sys``). Verified here: the host veth and the ``cni0``
bridge appear in the node namespace, ``eth0`` in the pod namespace. The plugins (Go
programs that live a few milliseconds) get ``GOMAXPROCS=1``: they do one thing at a
time, and a runtime with one processor starts fewer threads (about 15% less CPU per
pod here, with 8 attached concurrently).

Per pod, as CRI-O does (and containerd with ``use_internal_loopback``): the runtime
itself brings the sandbox's ``lo`` up (:func:`dataplane.linux.nsenter.loopback_up`, one
ioctl; all the CNI ``loopback`` plugin would do, and the CNI maintainers mean to
deprecate it), then ``bridge`` ADD for ``eth0`` with this network configuration
(stdin)::

    {"cniVersion": "1.0.0", "name": "svclab", "type": "bridge", "bridge": "cni0",
     "isGateway": true, "ipMasq": false, "hairpinMode": true, "mtu": <mtu>,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "<podCIDR>"}]],
              "routes": [{"dst": "0.0.0.0/0"}],
              "dataDir": "/run/svclab/<id>/ipam/<podCIDR with _ for />"}}

One host-local store per node (per podCIDR), as on real nodes: host-local keeps its
round-robin pointer in ``last_reserved_ip.<range index>``, and nodes sharing one store
would move each other's pointer out of their range, which resets it (allocation then
restarts at the lowest free address instead of continuing after the last one).

Addresses: host-local allocates in order from ``.2`` of the podCIDR. To make both
backends give a pod the same address, :meth:`CniRunner.add` passes the control plane's
choice as ``CNI_ARGS=IgnoreUnknown=1;IP=<ip>;MAC=<mac>`` (host-local honours ``IP``,
the bridge plugin ``MAC``), and the MAC defaults to the model's
(:func:`netmodel.network.stable_mac`). ``IgnoreUnknown`` is required because each plugin
rejects the other's key otherwise.

Where a pod's time goes (perf and syscall tracepoints, 2 cores, 8 workers): the
``bridge`` plugin ~4.7 ms of CPU, the ``host-local`` it execs ~2.6 ms (Go start-up,
~1.3 ms to ``main``, and page faults are a third of it; no garbage collection runs, so
``GOGC`` changes nothing), this process ~2.7 ms (the sandbox namespace ~1.1 ms, the
exec ~0.9 ms, the cached result ~0.5 ms). The bridge plugin's wait for its host veth to
be operationally up (it sleeps 50 ms when it is not) was never hit. host-local holds its
per-node file lock only while it writes the reservation; pods of one node queue on it
when the holder is preempted, but spreading concurrent pods over nodes was no faster.
Disabling IPv6 in the namespaces saved nothing. Reaping is deferred: see
:class:`LateReaper`.

A pod with ``hostPort`` mappings gets the ``portmap`` plugin chained after ``bridge``, as
containerd and CRI-O chain it: the same network name, ``capabilities: {portMappings:
true}``, ``runtimeConfig.portMappings`` = ``[{hostPort, containerPort, protocol,
hostIP}]`` and the bridge's result as ``prevResult``. It writes the nat rules modelled
in :mod:`netmodel.hostports` into the node namespace (iptables). DEL runs ``portmap``
DEL first (it removes the pod's ``CNI-DN-…`` chain and its ``CNI-HOSTPORT-DNAT``
rules), then ``bridge`` DEL, the reverse of ADD as libcni does; the mappings are kept in
the cached result so a later process can DEL. The plugin runs ``iptables`` (and
``ip6tables``) from ``PATH``: on a cluster realised on the iptables legacy back end
(``iptables_backend="legacy"``) ``PATH`` starts with a directory of the cluster's state
where those two names are links to ``xtables-legacy-multi``, so the plugin's rules land
in the same back end as kube-proxy's (this host's ``iptables`` is iptables-nft), as a
node whose ``iptables`` alternative is legacy has it.

CNI ADD is not idempotent (a second ADD fails: "eth0 already exists", "IP not
available"). :meth:`CniRunner.add` therefore keeps libcni's result cache (one JSON per
pod in the cluster's state dir) and returns the cached result when the pod's ``eth0``
still carries that address.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import subprocess
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from ipaddress import IPv4Address, IPv4Interface, IPv4Network
from pathlib import Path
from typing import Any, Literal

from dataplane.linux import nsenter
from dataplane.linux.links import NsLink
from dataplane.linux.names import ClusterNames
from dataplane.linux.phases import Phases, maybe_step
from dataplane.linux.state import StateDir
from netmodel.errors import BackendError
from netmodel.hostports import NETWORK, PortMapping
from netmodel.network import stable_mac

CniMode = Literal["bridge-plugin", "netlink"]
"""How pods are attached. ``bridge-plugin``: the real CNI ``bridge`` + ``host-local``
plugins, ``lo`` brought up by the runtime (this module). ``netlink``: svclab creates the very same layout
itself with pyroute2 (host veth names and every MAC exactly as the model has them);
use it where the plugins are not installed or to compare against the plugins."""

PLUGIN_DIR = Path("/usr/lib/cni")
NETWORK_NAME = NETWORK
BRIDGE = "cni0"


class CniError(BackendError):
    """A CNI plugin failed; the message carries the plugin's own ``msg`` and ``code``."""


REAP_DELAY = 0.01
"""Seconds an exited plugin stays a zombie before :class:`LateReaper` reaps it."""


class LateReaper:
    """Reaps exited plugin processes some milliseconds after they exit, not at once.

    Why: the bridge plugin (Go) opens ``/proc/<pid>/task/<tid>/ns/net`` from a second
    thread (``ns.Do``), and reaping such a process right after it exits makes the kernel
    invalidate its ``/proc`` dentries while its threads' own exit is still tearing them
    down: ``wait4`` then loops in ``shrink_dcache_parent``/``d_walk`` until that is done,
    measured here at ~6 ms of wall time per pod, ~1.7 ms of it CPU (perf). Reaped 10 ms
    later the same ``wait4`` takes ~0.1 ms. The exit status is read beforehand without
    reaping (``waitid(WNOWAIT)``), so a caller learns it at once.

    Thread-safe. :meth:`defer` takes an exited, unreaped process and reaps those whose
    delay is over; :meth:`drain` reaps all of them (no zombie outlives it)."""

    def __init__(self, delay: float = REAP_DELAY) -> None:
        self.delay = delay
        self._lock = threading.Lock()
        self._pending: list[tuple[float, subprocess.Popen[bytes]]] = []

    def defer(self, proc: subprocess.Popen[bytes]) -> None:
        now = time.monotonic()
        with self._lock:
            self._pending.append((now + self.delay, proc))
            due = [p for t, p in self._pending if t <= now]
            self._pending = [(t, p) for t, p in self._pending if t > now]
        for p in due:
            p.wait()

    def drain(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        for _, p in pending:
            p.wait()


def run_plugin(
    argv: Sequence[str],
    stdin: bytes,
    env: dict[str, str],
    timeout: float,
    reaper: LateReaper,
) -> tuple[int, bytes, bytes]:
    """Run one plugin process: feed it ``stdin``, collect its stdout and stderr, return
    (exit code, stdout, stderr) once it has exited, and leave reaping it to ``reaper``
    (:class:`LateReaper`). A negative exit code is the signal that killed it. Raises
    :class:`subprocess.TimeoutExpired` (the process killed and reaped) after
    ``timeout`` seconds. The process starts in the calling thread's namespaces."""
    proc = subprocess.Popen(
        list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    deadline = time.monotonic() + timeout
    chunks: dict[int, list[bytes]] = {1: [], 2: []}
    try:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        with contextlib.suppress(BrokenPipeError):  # a plugin may exit without reading
            proc.stdin.write(stdin)
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
        pidfd = os.pidfd_open(proc.pid)
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(proc.stdout, selectors.EVENT_READ, 1)
                sel.register(proc.stderr, selectors.EVENT_READ, 2)
                sel.register(pidfd, selectors.EVENT_READ, 0)
                exited = False
                while len(sel.get_map()) > 1 or not exited:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise subprocess.TimeoutExpired(list(argv), timeout)
                    for key, _ in sel.select(left):
                        if key.data == 0:
                            exited = True
                            sel.unregister(pidfd)
                            continue
                        data = os.read(key.fd, 65536)
                        if data:
                            chunks[key.data].append(data)
                        else:
                            sel.unregister(key.fileobj)
        finally:
            os.close(pidfd)
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]
    assert info is not None
    code = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
    reaper.defer(proc)
    return code, b"".join(chunks[1]), b"".join(chunks[2])


@dataclass(frozen=True, slots=True)
class CniResult:
    """What the kubelet learns from CNI ADD: the pod's address, its gateway, the host-side
    veth in the node namespace, and the pod's ``eth0`` MAC."""

    ip: IPv4Address
    prefixlen: int
    gateway: IPv4Address
    host_veth: str
    mac: str

    @property
    def interface(self) -> IPv4Interface:
        return IPv4Interface(f"{self.ip}/{self.prefixlen}")

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["ip"], d["gateway"] = str(self.ip), str(self.gateway)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CniResult:
        return cls(
            ip=IPv4Address(d["ip"]),
            prefixlen=int(d["prefixlen"]),
            gateway=IPv4Address(d["gateway"]),
            host_veth=str(d["host_veth"]),
            mac=str(d["mac"]),
        )


def parse_result(raw: dict[str, Any], *, ifname: str = "eth0") -> CniResult:
    """Read a CNI 1.0.0 ADD result of the bridge plugin into a :class:`CniResult`."""
    itfs: list[dict[str, Any]] = raw.get("interfaces", [])
    try:
        pod_idx = next(i for i, x in enumerate(itfs) if x.get("sandbox") and x["name"] == ifname)
        host = next(x for x in itfs if not x.get("sandbox") and x["name"] != BRIDGE)
        ipc = next(x for x in raw.get("ips", []) if x.get("interface") == pod_idx)
    except StopIteration as e:
        raise CniError(f"CNI result without {ifname}, host veth or address: {raw}") from e
    addr = IPv4Interface(ipc["address"])
    return CniResult(
        ip=addr.ip,
        prefixlen=addr.network.prefixlen,
        gateway=IPv4Address(ipc["gateway"]),
        host_veth=str(host["name"]),
        mac=str(itfs[pod_idx]["mac"]),
    )


@dataclass(frozen=True, slots=True)
class PodAttach:
    """One pod to attach (for :meth:`CniRunner.add_many`)."""

    node: str
    pod_key: str
    pod_cidr: IPv4Network
    requested_ip: IPv4Address | None = None
    mac: str | None = None
    port_mappings: tuple[PortMapping, ...] = ()


class CniRunner:
    """Runs the CNI plugins for the pods of one realised cluster.

    This is the kubelet's real network plugin: ``add`` = sandbox netns + CNI ADD,
    ``delete`` = CNI DEL + sandbox removal. Safe to call from several threads.
    """

    def __init__(
        self,
        cluster_id: str,
        *,
        mtu: int = 1500,
        plugin_dir: Path = PLUGIN_DIR,
        timeout: float = 30,
        phases: Phases | None = None,
        iptables_backend: Literal["nft", "legacy"] = "nft",
    ) -> None:
        self.names = ClusterNames(cluster_id)
        self.phases = phases
        self.state = StateDir.of(cluster_id)
        self.mtu = mtu
        self.plugin_dir = plugin_dir
        self.timeout = timeout
        self.reaper = LateReaper()
        self.iptables_backend = iptables_backend
        self._path_lock = threading.Lock()
        self._plugin_path: str | None = None

    def _path(self) -> str:
        """The ``PATH`` the plugins get: ours, behind a directory whose ``iptables`` and
        ``ip6tables`` are the legacy ones when the cluster is on that back end (module
        docstring). Made once per runner (its calls run in several threads); another
        process making the same links at once is tolerated (each link is renamed into
        place from a name of its own)."""
        with self._path_lock:
            if self._plugin_path is None:
                self._plugin_path = self._make_path()
            return self._plugin_path

    def _make_path(self) -> str:
        path = os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        if self.iptables_backend != "legacy":
            return path
        multi = shutil.which("xtables-legacy-multi", path=path + ":/usr/sbin:/sbin")
        if multi is None:
            raise CniError("iptables legacy back end: xtables-legacy-multi not found")
        bindir = self.state.root / "bin"
        bindir.mkdir(parents=True, exist_ok=True)
        for name in ("iptables", "ip6tables"):
            link = bindir / name
            if not link.is_symlink() or os.readlink(link) != multi:
                tmp = bindir / f".{name}.{os.getpid()}.{threading.get_ident()}"
                tmp.unlink(missing_ok=True)
                tmp.symlink_to(multi)
                tmp.replace(link)
        return f"{bindir}:{path}"

    # ------------------------------------------------------------------ config
    def netconf(self, pod_cidr: IPv4Network) -> dict[str, Any]:
        """The network configuration handed to the bridge plugin on stdin."""
        return {
            "cniVersion": "1.0.0",
            "name": NETWORK_NAME,
            "type": "bridge",
            "bridge": BRIDGE,
            "isGateway": True,
            "ipMasq": False,
            "hairpinMode": True,
            "mtu": self.mtu,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": str(pod_cidr)}]],
                "routes": [{"dst": "0.0.0.0/0"}],
                "dataDir": str(self.state.ipam_dir / str(pod_cidr).replace("/", "_")),
            },
        }

    def portmap_conf(
        self, mappings: Sequence[PortMapping], prev: dict[str, Any] | None
    ) -> dict[str, Any]:
        """The network configuration handed to the ``portmap`` plugin: the runtime's
        ``runtimeConfig.portMappings`` for the pod, the bridge's result as
        ``prevResult`` (``snat`` left at the plugin's default)."""
        conf: dict[str, Any] = {
            "cniVersion": "1.0.0",
            "name": NETWORK_NAME,
            "type": "portmap",
            "capabilities": {"portMappings": True},
            "runtimeConfig": {"portMappings": [m.to_runtime_config() for m in mappings]},
        }
        if prev is not None:
            conf["prevResult"] = prev
        return conf

    # ------------------------------------------------------------------ exec
    def _exec(
        self,
        node: str,
        plugin: str,
        command: Literal["ADD", "DEL", "CHECK"],
        pod_key: str,
        ifname: str,
        conf: dict[str, Any],
        args: str = "",
    ) -> dict[str, Any]:
        if not (self.plugin_dir / plugin).exists():
            raise CniError(f"CNI plugin {plugin} not found in {self.plugin_dir}")
        env = {
            "PATH": self._path(),
            "CNI_COMMAND": command,
            "CNI_CONTAINERID": self.names.container_id(pod_key),
            "CNI_NETNS": nsenter.netns_path(self.names.netns(f"pod/{pod_key}")),
            "CNI_IFNAME": ifname,
            "CNI_PATH": str(self.plugin_dir),
            "GOMAXPROCS": "1",
        }
        if args:
            env["CNI_ARGS"] = args
        try:
            with nsenter.entered(self.names.netns(f"node/{node}")):
                code, out_b, err_b = run_plugin(
                    [str(self.plugin_dir / plugin)],
                    json.dumps(conf).encode(),
                    env,
                    self.timeout,
                    self.reaper,
                )
        except subprocess.TimeoutExpired as e:
            raise CniError(f"CNI {command} {plugin} for pod {pod_key}: timed out") from e
        out, err_text = out_b.decode(errors="replace"), err_b.decode(errors="replace")
        if code != 0:
            try:
                err = json.loads(out)
                why = f"{err.get('msg')} (code {err.get('code')})"
            except json.JSONDecodeError:
                why = (err_text or out).strip() or f"exit code {code}"
            raise CniError(f"CNI {command} {plugin} for pod {pod_key} on node {node}: {why}")
        out = out.strip()
        return json.loads(out) if out else {}

    # ------------------------------------------------------------------ API
    def add(
        self,
        node: str,
        pod_key: str,
        pod_cidr: IPv4Network,
        *,
        requested_ip: IPv4Address | None = None,
        mac: str | None = None,
        port_mappings: Sequence[PortMapping] = (),
    ) -> CniResult:
        """Attach pod ``pod_key`` (``ns/name``) on ``node``: create its sandbox namespace
        if missing, bring its ``lo`` up, run ``bridge`` ADD (then ``portmap`` ADD when
        ``port_mappings`` is not empty), cache and return the result.

        ``requested_ip`` None lets host-local choose (in order from ``.2``); otherwise
        that address is used or CniError says why not (taken, outside the range). ``mac``
        defaults to the model's MAC for the pod. Idempotent: a pod already attached with
        the cached result is returned as is; one whose sandbox lost its address (or that
        asks for another address) is DELeted and attached again."""
        try:
            return self._add(
                node,
                pod_key,
                pod_cidr,
                requested_ip=requested_ip,
                mac=mac,
                port_mappings=tuple(port_mappings),
            )
        finally:
            self.reaper.drain()

    def _add(
        self,
        node: str,
        pod_key: str,
        pod_cidr: IPv4Network,
        *,
        requested_ip: IPv4Address | None = None,
        mac: str | None = None,
        port_mappings: tuple[PortMapping, ...] = (),
    ) -> CniResult:
        """:meth:`add` without reaping the plugin processes at the end."""
        with maybe_step(self.phases, "cni_cache_check"):
            cached = self.cached(pod_key)
            pod_ns = self.names.netns(f"pod/{pod_key}")
            if (
                cached is not None
                and (requested_ip is None or cached.ip == requested_ip)
                and self._cached_mappings(pod_key) == port_mappings
                and _has_address(pod_ns, cached.interface)
            ):
                return cached
        if cached is not None:  # attached once, gone or changed since: release first
            stale = self.state.read_json(self.state.cni_result(pod_key)) or {}
            self._release(
                node, pod_key, pod_cidr, stale.get("raw"), self._cached_mappings(pod_key)
            )
            self.state.cni_result(pod_key).unlink(missing_ok=True)
        mac = mac or stable_mac("pod", pod_key)
        with maybe_step(self.phases, "cni_netns"):
            created = nsenter.create_netns(pod_ns)
        try:
            with maybe_step(self.phases, "cni_loopback_up"):
                nsenter.loopback_up(pod_ns)
            args = f"IgnoreUnknown=1;MAC={mac}"
            if requested_ip is not None:
                args += f";IP={requested_ip}"
            with maybe_step(self.phases, "cni_bridge_exec"):
                raw = self._exec(
                    node, "bridge", "ADD", pod_key, "eth0", self.netconf(pod_cidr), args
                )
            if port_mappings:
                with maybe_step(self.phases, "cni_portmap_exec"):
                    raw = self._exec(
                        node,
                        "portmap",
                        "ADD",
                        pod_key,
                        "eth0",
                        self.portmap_conf(port_mappings, raw),
                        args,
                    )
        except BaseException:
            if created:  # leave nothing behind for a pod we failed to attach
                with contextlib.suppress(BackendError):
                    self._release(node, pod_key, pod_cidr, None, port_mappings)
                nsenter.remove_netns(pod_ns)
            raise
        result = parse_result(raw)
        with maybe_step(self.phases, "cni_result_write"):
            self._write_result(pod_key, node, pod_cidr, raw, result, port_mappings)
        return result

    def _write_result(
        self,
        pod_key: str,
        node: str,
        pod_cidr: IPv4Network,
        raw: dict[str, Any],
        result: CniResult,
        port_mappings: tuple[PortMapping, ...] = (),
    ) -> None:
        self.state.ensure().write_json(
            self.state.cni_result(pod_key),
            {
                "raw": raw,
                "node": node,
                "pod": pod_key,
                "pod_cidr": str(pod_cidr),
                "port_mappings": [m.to_runtime_config() for m in port_mappings],
                **result.to_json(),
            },
        )

    def _cached_mappings(self, pod_key: str) -> tuple[PortMapping, ...]:
        """The port mappings a pod was attached with (none when never attached)."""
        d = self.state.read_json(self.state.cni_result(pod_key)) or {}
        return tuple(
            PortMapping(
                int(m["hostPort"]), int(m["containerPort"]), str(m["protocol"]), str(m["hostIP"])
            )
            for m in d.get("port_mappings", [])
        )

    def add_many(self, pods: Sequence[PodAttach], *, workers: int = 8) -> list[CniResult]:
        """:meth:`add` for many pods concurrently (plugin execs dominate; host-local
        serialises its own allocations with a file lock). Results in input order; the
        first error (or a KeyboardInterrupt) cancels the calls not yet started."""
        pool = ThreadPoolExecutor(max_workers=workers)
        try:
            futures = [
                pool.submit(
                    self._add,
                    p.node,
                    p.pod_key,
                    p.pod_cidr,
                    requested_ip=p.requested_ip,
                    mac=p.mac,
                    port_mappings=p.port_mappings,
                )
                for p in pods
            ]
            return [f.result() for f in futures]
        finally:  # on error or Ctrl-C: drop what has not started, let running calls end
            pool.shutdown(wait=True, cancel_futures=True)
            self.reaper.drain()

    def delete(self, node: str, pod_key: str, pod_cidr: IPv4Network) -> None:
        """Detach pod ``pod_key``: ``portmap`` DEL when it was attached with port
        mappings (its nat rules), ``bridge`` DEL (releases the address in host-local,
        removes the veth), then remove the sandbox namespace (its ``lo`` with it) and
        the cached result. Tolerates a pod that is already (partly) gone."""
        cached = self.state.read_json(self.state.cni_result(pod_key))
        try:
            self._release(
                node,
                pod_key,
                pod_cidr,
                cached.get("raw") if cached else None,
                self._cached_mappings(pod_key),
            )
        finally:
            self.reaper.drain()
        nsenter.remove_netns(self.names.netns(f"pod/{pod_key}"))
        self.state.cni_result(pod_key).unlink(missing_ok=True)

    def _release(
        self,
        node: str,
        pod_key: str,
        pod_cidr: IPv4Network,
        prev: dict[str, Any] | None,
        port_mappings: Sequence[PortMapping] = (),
    ) -> None:
        if port_mappings:
            self._exec(
                node, "portmap", "DEL", pod_key, "eth0", self.portmap_conf(port_mappings, prev)
            )
        conf = self.netconf(pod_cidr)
        if prev is not None:
            conf["prevResult"] = prev
        self._exec(node, "bridge", "DEL", pod_key, "eth0", conf)

    def attached(self) -> dict[str, tuple[str, IPv4Network]]:
        """Every pod with a cached ADD result: pod key -> (node, podCIDR)."""
        out: dict[str, tuple[str, IPv4Network]] = {}
        for path in sorted(self.state.cni_dir.glob("*.json")):
            d = self.state.read_json(path)
            if d and "pod" in d:
                out[str(d["pod"])] = (str(d["node"]), IPv4Network(d["pod_cidr"]))
        return out

    def cached(self, pod_key: str) -> CniResult | None:
        """The cached ADD result of a pod, None if it was never attached (or deleted)."""
        d = self.state.read_json(self.state.cni_result(pod_key))
        return None if d is None else CniResult.from_json(d)


def _has_address(pod_ns: str, addr: IPv4Interface) -> bool:
    """Does ``eth0`` in ``pod_ns`` carry ``addr``? (False if the namespace is gone.)"""
    if nsenter.inode(pod_ns) is None:
        return False
    with NsLink(pod_ns) as link:
        idx = link.index("eth0")
        if idx is None:
            return False
        return any(
            a.get_attr("IFA_ADDRESS") == str(addr.ip) and a["prefixlen"] == addr.network.prefixlen
            for a in link.ipr.get_addr(family=2, index=idx)
        )
