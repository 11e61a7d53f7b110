"""An independent oracle for cluster DNS: the answers the Kubernetes DNS specification
(schema 1.1.0, https://github.com/kubernetes/dns/blob/master/docs/specification.md) and
CoreDNS's kubernetes plugin as kubeadm configures it (``pods insecure``, ``ttl 30``,
``forward`` to an upstream) give for a question, computed straight from the API
objects' Kubernetes JSON (``Service``, ``EndpointSlice``, ``Namespace``).

It is a second path on purpose: it imports nothing of svclab's (no ``dataplane``, no
``netmodel.dnszone``, no dnspython), so the differential tests that compare the DNS
servers' answers with it compare two pieces of code written separately
(tests/test_dnsoracle_is_independent.py checks the imports).

What it answers (``<d>`` the cluster domain, every TTL 30, owner names as asked):

* ``<svc>.<ns>.svc.<d>``: A the ClusterIP (spec 2.3.1); headless, A each *ready*
  endpoint address of the Service's IPv4 EndpointSlices (``conditions.ready`` not false,
  2.4.1), NXDOMAIN when there is none; ExternalName, CNAME the external name (2.5.1),
  and for A the upstream's addresses of that name after it; SRV one record per port
  (priority 0, weight 100 divided by the number of records, 2.3.2 / 2.4.2), headless
  one per endpoint and port with the endpoint's name as target, with the targets' A
  records as additional data;
* ``_<port>._<proto>.<svc>.<ns>.svc.<d>``: the same, of the named port only;
  NXDOMAIN when the Service has no such port;
* ``<hostname>.<svc>.<ns>.svc.<d>`` for headless Services (2.4.1): the endpoint whose
  ``hostname`` is that, or, without one, whose address with dashes is;
* ``<a>-<b>-<c>-<d>.<ns>.pod.<d>``: A ``a.b.c.d`` when the namespace exists;
* PTR of a ClusterIP (the Service's name, 2.3.3) or of a headless endpoint address
  (2.4.3);
* ``dns-version.<d>`` TXT ``"1.1.0"`` (2.2); ``<d>`` SOA and NS;
* a name that exists without records of the type asked: NODATA (NOERROR, empty);
  empty non-terminals (``svc.<d>``, ``<ns>.svc.<d>`` of an existing namespace) too;
  any other name in ``<d>``: NXDOMAIN. Both carry the SOA in the authority section;
* names outside the cluster: the upstream table (A records, not authoritative).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

TTL = 30
SCHEMA = "1.1.0"
SOA_TIMERS = "7200 1800 86400 30"  # CoreDNS: refresh, retry, expire, minimum (= ttl)
SERVICE_NAME_LABEL = "kubernetes.io/service-name"

Record = tuple[str, int, str, str]  # owner, ttl, type, rdata (as dig prints it)


@dataclass(frozen=True)
class Expected:
    """What a correct server answers: ``rcode``; the answer and additional records;
    ``soa``: an SOA for the owner given in the authority section (NXDOMAIN and NODATA of
    the cluster's zones); ``authoritative``: the ``aa`` flag."""

    rcode: str
    answer: frozenset[Record] = frozenset()
    additional: frozenset[Record] = frozenset()
    soa: str | None = None
    authoritative: bool = True


@dataclass
class _Svc:
    ns: str
    name: str
    kind: str  # "clusterip", "headless", "external"
    ips: list[str] = field(default_factory=list)
    external: str = ""
    ports: list[tuple[str, str, int]] = field(default_factory=list)  # name, proto, port
    # headless: (address, endpoint name, ports of its slice)
    endpoints: list[tuple[str, str, list[tuple[str, str, int]]]] = field(default_factory=list)


def _dashed(ip: str) -> str:
    return ip.replace(".", "-")


def _undash(label: str) -> str | None:
    parts = label.split("-")
    if len(parts) != 4 or not all(p.isdigit() and int(p) < 256 and str(int(p)) == p for p in parts):
        return None
    return ".".join(parts)


def _proto(p: Mapping[str, Any]) -> str:
    return str(p.get("protocol") or "TCP").lower()


class Oracle:
    """Expected answers for the objects given (Kubernetes JSON dicts)."""

    def __init__(
        self,
        *,
        namespaces: Iterable[Mapping[str, Any]],
        services: Iterable[Mapping[str, Any]],
        slices: Iterable[Mapping[str, Any]],
        upstream: Mapping[str, list[str]],
        domain: str = "cluster.local",
    ) -> None:
        self.domain = domain
        self.upstream = {k.lower().rstrip("."): list(v) for k, v in upstream.items()}
        self.namespaces = {n["metadata"]["name"] for n in namespaces}
        self.services: dict[tuple[str, str], _Svc] = {}
        slice_list = list(slices)
        for s in services:
            meta, spec = s["metadata"], s.get("spec", {})
            ns, name = meta.get("namespace", "default"), meta["name"]
            ports = [(p.get("name", ""), _proto(p), int(p["port"])) for p in spec.get("ports", [])]
            if spec.get("type") == "ExternalName":
                self.services[(ns, name)] = _Svc(
                    ns, name, "external", external=spec["externalName"].rstrip("."), ports=ports
                )
            elif spec.get("clusterIP") == "None":
                svc = _Svc(ns, name, "headless", ports=ports)
                self._endpoints(svc, slice_list)
                self.services[(ns, name)] = svc
            else:
                ips = [i for i in spec.get("clusterIPs") or [spec["clusterIP"]] if ":" not in i]
                self.services[(ns, name)] = _Svc(ns, name, "clusterip", ips=ips, ports=ports)
        self.dns_ip = self.services[("kube-system", "kube-dns")].ips[0]

    @staticmethod
    def _endpoints(svc: _Svc, slices: list[Mapping[str, Any]]) -> None:
        seen: set[str] = set()
        mine = [
            s
            for s in slices
            if s["metadata"].get("namespace", "default") == svc.ns
            and s["metadata"].get("labels", {}).get(SERVICE_NAME_LABEL) == svc.name
            and s.get("addressType") == "IPv4"
        ]
        for s in sorted(mine, key=lambda s: s["metadata"]["name"]):
            ports = [
                (p.get("name", ""), _proto(p), int(p.get("port", 0))) for p in s.get("ports") or []
            ]
            for ep in s.get("endpoints") or []:
                if ep.get("conditions", {}).get("ready") is False:
                    continue  # not ready: not published (spec 2.1 "ready")
                for addr in ep["addresses"]:
                    if addr not in seen:
                        seen.add(addr)
                        svc.endpoints.append((addr, ep.get("hostname") or _dashed(addr), ports))

    # ----------------------------------------------------------------- questions

    def names(self) -> list[str]:
        """Every name the objects define (services, their named ports and, headless,
        their endpoints), absolute: what a test should ask about."""
        d = self.domain
        out = []
        for svc in self.services.values():
            base = f"{svc.name}.{svc.ns}.svc.{d}."
            out.append(base)
            out += [f"_{n}._{p}.{base}" for n, p, _ in svc.ports if n]
            out += [f"{host}.{base}" for _, host, _ in svc.endpoints]
        return sorted(set(out))

    def answer(self, qname: str, qtype: str) -> Expected:
        """The expected answer to ``qname`` (absolute or not) of type ``qtype``."""
        owner = qname if qname.endswith(".") else qname + "."
        labels = owner.lower().rstrip(".").split(".")
        dom = self.domain.split(".")
        if labels[-len(dom) :] == dom:
            return self._cluster(owner, labels[: -len(dom)], qtype.upper())
        if labels[-2:] == ["in-addr", "arpa"] and qtype.upper() == "PTR":
            got = self._ptr(owner, labels[:-2])
            if got is not None:
                return got
        ips = self.upstream.get(".".join(labels))
        if ips is None:
            return Expected("NXDOMAIN", authoritative=False)
        recs = [(owner, TTL, "A", ip) for ip in ips] if qtype.upper() == "A" else []
        return Expected("NOERROR", frozenset(recs), authoritative=False)

    def _soa(self) -> str:
        d = self.domain
        return f"ns.dns.{d}. hostmaster.{d}."

    def _nodata(self) -> Expected:
        return Expected("NOERROR", soa=self._soa())

    def _nxdomain(self) -> Expected:
        return Expected("NXDOMAIN", soa=self._soa())

    def _ok(self, answer: list[Record], additional: Iterable[Record] = ()) -> Expected:
        if not answer:
            return self._nodata()
        return Expected("NOERROR", frozenset(answer), frozenset(additional))

    def _cluster(self, owner: str, rel: list[str], qtype: str) -> Expected:
        d = self.domain
        if not rel:
            if qtype == "NS":
                return self._ok(
                    [(owner, TTL, "NS", f"ns.dns.{d}.")], [(f"ns.dns.{d}.", TTL, "A", self.dns_ip)]
                )
            if qtype == "SOA":
                return Expected(
                    "NOERROR", frozenset([(owner, TTL, "SOA", f"{self._soa()} * {SOA_TIMERS}")])
                )
            return self._nodata()
        if rel == ["dns-version"]:
            return self._ok([(owner, TTL, "TXT", f'"{SCHEMA}"')] if qtype == "TXT" else [])
        if rel == ["ns", "dns"]:
            return self._ok([(owner, TTL, "A", self.dns_ip)] if qtype == "A" else [])
        if rel[-1] not in ("svc", "pod"):
            return self._nxdomain()
        if len(rel) == 1:
            return self._nodata()
        ns = rel[-2]
        if ns not in self.namespaces:
            return self._nxdomain()
        if len(rel) == 2:
            return self._nodata()
        if rel[-1] == "pod":
            ip = _undash(rel[0]) if len(rel) == 3 else None
            if ip is None:
                return self._nxdomain()
            return self._ok([(owner, TTL, "A", ip)] if qtype == "A" else [])
        svc = self.services.get((ns, rel[-3]))
        if svc is None:
            return self._nxdomain()
        head = rel[:-3]
        if not head:
            return self._service(owner, svc, qtype, None)
        if len(head) == 1:
            eps = [e for e in svc.endpoints if e[1] == head[0]]
            if svc.kind != "headless" or not eps:
                return self._nxdomain()
            return self._endpoint_records(owner, svc, eps[:1], qtype, None)
        if len(head) == 2 and head[0].startswith("_") and head[1].startswith("_"):
            port = (head[0][1:], head[1][1:])
            if svc.kind != "external" and port not in [(n, p) for n, p, _ in svc.ports]:
                return self._nxdomain()
            return self._service(owner, svc, qtype, port)
        return self._nxdomain()

    def _service(self, owner: str, svc: _Svc, qtype: str, port: tuple[str, str] | None) -> Expected:
        base = f"{svc.name}.{svc.ns}.svc.{self.domain}."
        if svc.kind == "external":
            target = svc.external + "."
            answer = [(owner, TTL, "CNAME", target)]
            if qtype == "A":
                answer += [(target, TTL, "A", ip) for ip in self.upstream.get(svc.external, [])]
            return self._ok(answer)
        if svc.kind == "headless":
            if not svc.endpoints:
                return self._nxdomain()
            return self._endpoint_records(owner, svc, svc.endpoints, qtype, port)
        if qtype == "A":
            return self._ok([(owner, TTL, "A", ip) for ip in svc.ips])
        if qtype == "SRV":
            ports = [p for n, pr, p in svc.ports if port is None or (n, pr) == port]
            w = 100 // max(1, len(ports))
            return self._ok(
                [(owner, TTL, "SRV", f"0 {w} {p} {base}") for p in ports],
                [(base, TTL, "A", ip) for ip in svc.ips] if ports else [],
            )
        return self._nodata()

    def _endpoint_records(
        self,
        owner: str,
        svc: _Svc,
        eps: list[tuple[str, str, list[tuple[str, str, int]]]],
        qtype: str,
        port: tuple[str, str] | None,
    ) -> Expected:
        base = f"{svc.name}.{svc.ns}.svc.{self.domain}."
        if qtype == "A":
            return self._ok([(owner, TTL, "A", ip) for ip, _, _ in eps])
        if qtype == "SRV":
            rows = [
                (ip, host, p)
                for ip, host, ports in eps
                for n, pr, p in ports
                if port is None or (n, pr) == port
            ]
            w = 100 // max(1, len(rows))
            return self._ok(
                [(owner, TTL, "SRV", f"0 {w} {p} {host}.{base}") for _, host, p in rows],
                [(f"{host}.{base}", TTL, "A", ip) for ip, host, _ in rows],
            )
        return self._nodata()

    def _ptr(self, owner: str, octets: list[str]) -> Expected | None:
        if len(octets) != 4:
            return None
        ip = ".".join(reversed(octets))
        answer = []
        for svc in self.services.values():
            base = f"{svc.name}.{svc.ns}.svc.{self.domain}."
            if ip in svc.ips:
                answer.append((owner, TTL, "PTR", base))
            answer += [
                (owner, TTL, "PTR", f"{host}.{base}") for a, host, _ in svc.endpoints if a == ip
            ]
        if not answer:
            return None  # not the cluster's: the upstream's (NXDOMAIN here)
        return Expected("NOERROR", frozenset(answer))

    # ------------------------------------------------------------- search list

    def search_order(self, name: str, namespace: str, ndots: int = 5) -> list[str]:
        """The names glibc asks for ``name`` from a ClusterFirst pod of ``namespace``
        (kubelet's ``search <ns>.svc.<d> svc.<d> <d>``, ``options ndots:5``)."""
        if name.endswith("."):
            return [name]
        d = self.domain
        with_search = [f"{name}.{s}." for s in (f"{namespace}.svc.{d}", f"svc.{d}", d)]
        if name.count(".") >= ndots:
            return [f"{name}.", *with_search]
        return [*with_search, f"{name}."]

    def search(
        self, name: str, namespace: str, qtype: str = "A"
    ) -> tuple[str, list[str], str | None]:
        """(status, the names asked in order, the name that answered): ``ok`` at the first
        name with records of ``qtype``; else ``NODATA`` when some name existed, else
        ``NXDOMAIN``."""
        asked: list[str] = []
        nodata = False
        for cand in self.search_order(name, namespace):
            asked.append(cand)
            e = self.answer(cand, qtype)
            if e.rcode == "NOERROR":
                if any(r[2] == qtype.upper() for r in e.answer):
                    return "ok", asked, cand
                nodata = True
        return ("NODATA" if nodata else "NXDOMAIN"), asked, None

    def addresses(self, name: str, namespace: str) -> list[str]:
        """What ``getaddrinfo(name, AF_INET)`` returns: the A records of the first name of
        the search that has some (CNAMEs followed within the answer)."""
        status, _, cand = self.search(name, namespace, "A")
        if status != "ok" or cand is None:
            return []
        return sorted({r[3] for r in self.answer(cand, "A").answer if r[2] == "A"})
