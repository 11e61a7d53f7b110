"""netmodel.reach: the computed matrix agrees with netpolicy.decide, pair by pair and
port by port, on generated clusters and policies; and its listing and JSON form."""

from __future__ import annotations

from ipaddress import ip_address
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netmodel.netpolicy import PROTOCOLS, NetworkPolicy, PolicyPod, decide, policy_from_wire
from netmodel.reach import ALL, EMPTY, Matrix, PortSet, diff, ip_ranges, to_json, what_if
from netmodel.reachdelta import delta

KEYS = ("app", "tier")
VALUES = ("a", "b")
NS_NAMES = ("x", "y", "z")
PORT_NAMES = ("http", "dns")
SUBNETS = ("10.0.0.", "10.0.1.", "192.168.5.")


def _labels() -> st.SearchStrategy[dict[str, str]]:
    return st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=2)


def _selector() -> st.SearchStrategy[dict[str, Any]]:
    expr = st.one_of(
        st.builds(
            lambda k, op, vs: {"key": k, "operator": op, "values": sorted(set(vs))},
            st.sampled_from(KEYS),
            st.sampled_from(["In", "NotIn"]),
            st.lists(st.sampled_from(VALUES), min_size=1, max_size=2),
        ),
        st.builds(
            lambda k, op: {"key": k, "operator": op},
            st.sampled_from(KEYS),
            st.sampled_from(["Exists", "DoesNotExist"]),
        ),
    )
    return st.builds(
        lambda ml, me: {
            **({"matchLabels": ml} if ml else {}),
            **({"matchExpressions": me} if me else {}),
        },
        _labels(),
        st.lists(expr, max_size=1),
    )


CIDRS = ("10.0.0.0/24", "10.0.0.0/16", "10.0.1.0/25", "192.168.0.0/16", "0.0.0.0/0")
EXCEPTS = {
    "10.0.0.0/24": ("10.0.0.0/28", "10.0.0.128/25"),
    "10.0.0.0/16": ("10.0.1.0/24", "10.0.0.0/25"),
    "10.0.1.0/25": ("10.0.1.0/30",),
    "192.168.0.0/16": ("192.168.5.0/24",),
    "0.0.0.0/0": ("10.0.0.0/8",),
}


@st.composite
def _peer(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["pod", "ns", "both", "ip"]))
    if kind == "ip":
        cidr = draw(st.sampled_from(CIDRS))
        ex = draw(st.lists(st.sampled_from(EXCEPTS[cidr]), max_size=2, unique=True))
        return {"ipBlock": {"cidr": cidr, **({"except": ex} if ex else {})}}
    out: dict[str, Any] = {}
    if kind in ("pod", "both"):
        out["podSelector"] = draw(_selector())
    if kind in ("ns", "both"):
        out["namespaceSelector"] = draw(_selector())
    return out


@st.composite
def _port(draw: st.DrawFn) -> dict[str, Any]:
    out: dict[str, Any] = {"protocol": draw(st.sampled_from(PROTOCOLS))}
    kind = draw(st.sampled_from(["none", "num", "range", "name"]))
    if kind == "num":
        out["port"] = draw(st.sampled_from([53, 80, 81, 8080]))
    elif kind == "range":
        lo = draw(st.sampled_from([1, 80, 1000]))
        out["port"], out["endPort"] = lo, lo + draw(st.sampled_from([0, 1, 100]))
    elif kind == "name":
        out["port"] = draw(st.sampled_from([*PORT_NAMES, "nowhere"]))
    return out


@st.composite
def _rule(draw: st.DrawFn, peers_field: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    peers = draw(st.lists(_peer(), max_size=2))
    if peers:
        out[peers_field] = peers
    ports = draw(st.lists(_port(), max_size=2))
    if ports:
        out["ports"] = ports
    return out


@st.composite
def _policy(draw: st.DrawFn, i: int) -> NetworkPolicy:
    types = draw(st.sampled_from([["Ingress"], ["Egress"], ["Ingress", "Egress"]]))
    spec: dict[str, Any] = {"podSelector": draw(_selector()), "policyTypes": types}
    ingress = draw(st.lists(_rule("from"), max_size=2))
    egress = draw(st.lists(_rule("to"), max_size=2))
    if ingress:
        spec["ingress"] = ingress
    if egress:
        spec["egress"] = egress
    ns = draw(st.sampled_from(NS_NAMES))
    return policy_from_wire({"metadata": {"namespace": ns, "name": f"p{i}"}, "spec": spec})


@st.composite
def _cluster(
    draw: st.DrawFn,
) -> tuple[list[PolicyPod], list[NetworkPolicy], dict[str, dict[str, str]]]:
    namespaces = {
        n: {"kubernetes.io/metadata.name": n, **draw(_labels())}
        for n in draw(st.lists(st.sampled_from(NS_NAMES), min_size=1, max_size=3, unique=True))
    }
    n_pods = draw(st.integers(1, 5))
    hosts = draw(st.lists(st.integers(0, 255), min_size=n_pods, max_size=n_pods, unique=True))
    pods = []
    for i, host in enumerate(hosts):
        ports = draw(
            st.dictionaries(
                st.sampled_from(PORT_NAMES),
                st.tuples(st.sampled_from(PROTOCOLS), st.sampled_from([53, 80, 8080, 9000])),
                max_size=2,
            )
        )
        pods.append(
            PolicyPod(
                draw(st.sampled_from(sorted(namespaces))),
                f"p{i}",
                draw(_labels()),
                ip_address(draw(st.sampled_from(SUBNETS)) + str(host)),
                ports=ports,
                host_network=i == 4 and draw(st.booleans()),
            )
        )
    policies = [draw(_policy(i)) for i in range(draw(st.integers(0, 4)))]
    return pods, policies, namespaces


def _ports_to_try(policies: list[NetworkPolicy], pods: list[PolicyPod]) -> list[int]:
    """Every port at or next to a boundary a policy or pod names."""
    out = {1, 2, 65534, 65535}
    for pol in policies:
        for rule in (*pol.ingress, *pol.egress):
            for spec in rule.ports:
                for v in (spec.port, spec.end_port):
                    if isinstance(v, int):
                        out.update((v - 1, v, v + 1))
    for pod in pods:
        for _, num in pod.ports.values():
            out.update((num - 1, num, num + 1))
    return sorted(p for p in out if 1 <= p <= 65535)


def _check_agrees(
    pods: list[PolicyPod], policies: list[NetworkPolicy], namespaces: dict[str, dict[str, str]]
) -> Matrix:
    m = Matrix(pods, policies, namespaces)
    ports = _ports_to_try(policies, pods)
    for a in pods:
        for b in pods:
            for proto in PROTOCOLS:
                for port in ports:
                    want = decide(a, b, proto, port, policies, namespaces).allowed
                    got = m.allows(a.key, b.key, proto, port)
                    assert got == want, (a.key, b.key, proto, port, want)
    # bare addresses: the first and last of every range, both ways
    for r in m.ranges:
        for addr in {r.first, r.last}:
            ip = ip_address(addr)
            for pod in pods:
                for proto in PROTOCOLS:
                    for port in ports:
                        want_in = decide(ip, pod, proto, port, policies, namespaces).allowed
                        want_out = decide(pod, ip, proto, port, policies, namespaces).allowed
                        assert m.allows(r.key, pod.key, proto, port) == want_in, (r.key, pod.key)
                        assert m.allows(str(ip), pod.key, proto, port) == want_in
                        assert m.allows(pod.key, r.key, proto, port) == want_out, (pod.key, r.key)
    return m


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cluster())
def test_matrix_agrees_with_decide(
    cluster: tuple[list[PolicyPod], list[NetworkPolicy], dict[str, dict[str, str]]],
) -> None:
    pods, policies, namespaces = cluster
    m = _check_agrees(pods, policies, namespaces)
    # the listing says what connections() says, for every pair it lists and omits
    listed = {(a, b): p for a, b, p in m.pairs()}
    keys = [p.key for p in pods] + [r.key for r in m.ranges]
    for a in keys:
        for b in keys:
            if a == b or (a not in m._pod_at and b not in m._pod_at):
                assert (a, b) not in listed
                continue
            assert listed.get((a, b), EMPTY) == m.connections(a, b), (a, b)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cluster(), st.data())
def test_what_if_is_the_difference_of_two_computations(
    cluster: tuple[list[PolicyPod], list[NetworkPolicy], dict[str, dict[str, str]]],
    data: st.DataObject,
) -> None:
    pods, policies, namespaces = cluster
    # named p0..p4: often the name of a stored policy, which it then replaces
    added = data.draw(_policy(data.draw(st.integers(0, 4))))
    deleted = [p.key for p in policies[-1:]]
    before, after, changes = what_if(pods, policies, namespaces, add=[added], delete=deleted)
    rest = [p for p in policies if p.key not in deleted and p.key != added.key] + [added]
    # recomputing only what the change touches gives the same difference
    stored = Matrix(pods, policies, namespaces)
    assert delta(stored, add=[added], delete=deleted) == changes
    assert delta(stored, add=[added]) == what_if(pods, policies, namespaces, add=[added])[2]
    assert delta(stored, delete=deleted) == what_if(pods, policies, namespaces, delete=deleted)[2]
    # every change is what decide says before and after, on a port of it
    for ch in changes:
        for ps, allowed_after in ((ch.added, True), (ch.removed, False)):
            for proto, rs in zip(PROTOCOLS, ps.ranges, strict=True):
                for lo, _hi in rs:
                    assert after.allows(ch.src, ch.dst, proto, lo) == allowed_after
                    assert before.allows(ch.src, ch.dst, proto, lo) != allowed_after
    # and the pods' pairs not listed did not change
    changed = {(c.src, c.dst) for c in changes}
    ports = _ports_to_try([*policies, added], pods)
    for a in pods:
        for b in pods:
            if a is b or (a.key, b.key) in changed:
                continue
            for proto in PROTOCOLS:
                for port in ports:
                    assert (
                        decide(a, b, proto, port, policies, namespaces).allowed
                        == decide(a, b, proto, port, rest, namespaces).allowed
                    )


def test_port_sets() -> None:
    a = PortSet.of("TCP", 80, 90) | PortSet.of("TCP", 91, 100) | PortSet.of("UDP", 53, 53)
    assert a.ranges == (((80, 100),), ((53, 53),), ())
    assert a.text() == "TCP 80-100,UDP 53"
    assert (a & PortSet.of("TCP", 95, 200)).text() == "TCP 95-100"
    assert (a - PortSet.of("TCP", 85, 85)).text() == "TCP 80-84,86-100,UDP 53"
    assert ALL.text() == "All Connections" and ALL.to_json() == "all"
    assert (ALL - PortSet.of("SCTP")).text() == "TCP,UDP"
    assert a.to_json() == {"TCP": [[80, 100]], "UDP": [[53, 53]], "SCTP": []}
    assert a.contains("TCP", 100) and not a.contains("TCP", 101) and not a.contains("UDP", 54)


def test_ip_ranges_cut_at_blocks_and_join_alike_pieces() -> None:
    pol = policy_from_wire(
        {
            "metadata": {"namespace": "x", "name": "p"},
            "spec": {
                "podSelector": {},
                "ingress": [
                    {"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}]}
                ],
            },
        }
    )
    m = Matrix([], [pol], {})
    assert [r.key for r in m.ranges] == [
        "0.0.0.0-9.255.255.255",
        "10.0.0.0-10.0.255.255",
        "10.1.0.0-10.1.255.255",
        "10.2.0.0-10.255.255.255",
        "11.0.0.0-255.255.255.255",
    ]
    # pieces inside the same blocks are one range: no block at all, one range; two
    # adjacent excepts and the space before them, one range
    assert [r.key for r in ip_ranges([])] == ["0.0.0.0-255.255.255.255"]
    two = policy_from_wire(
        {
            "metadata": {"namespace": "x", "name": "p"},
            "spec": {
                "podSelector": {},
                "ingress": [
                    {
                        "from": [
                            {
                                "ipBlock": {
                                    "cidr": "10.0.0.0/8",
                                    "except": ["10.0.0.0/16", "10.1.0.0/16"],
                                }
                            }
                        ]
                    }
                ],
            },
        }
    )
    assert [r.key for r in Matrix([], [two], {}).ranges] == [
        "0.0.0.0-10.1.255.255",
        "10.2.0.0-10.255.255.255",
        "11.0.0.0-255.255.255.255",
    ]


def _pod(ns: str, name: str, labels: dict[str, str], ip: str, **kw: Any) -> PolicyPod:
    return PolicyPod(ns, name, labels, ip_address(ip), **kw)


def test_listing_and_json_of_a_default_deny_with_one_allow() -> None:
    ns = {n: {"kubernetes.io/metadata.name": n} for n in ("shop", "web")}
    api = _pod("shop", "api", {"app": "api"}, "10.244.1.5", ports={"http": ("TCP", 8080)})
    front = _pod("web", "front", {"app": "front"}, "10.244.2.7")
    deny = policy_from_wire(
        {"metadata": {"namespace": "shop", "name": "deny"}, "spec": {"podSelector": {}}}
    )
    allow = policy_from_wire(
        {
            "metadata": {"namespace": "shop", "name": "allow"},
            "spec": {
                "podSelector": {"matchLabels": {"app": "api"}},
                "ingress": [
                    {
                        "from": [
                            {
                                "namespaceSelector": {},
                                "podSelector": {"matchLabels": {"app": "front"}},
                            }
                        ],
                        "ports": [
                            {"protocol": "TCP", "port": "http"},
                            {"protocol": "UDP", "port": 53},
                        ],
                    }
                ],
            },
        }
    )
    m = Matrix([api, front], [deny, allow], ns)
    lines = [f"{a} => {b} : {p.text()}" for a, b, p in m.pairs()]
    assert lines == [
        "0.0.0.0-255.255.255.255 => web/front : All Connections",
        "shop/api => 0.0.0.0-255.255.255.255 : All Connections",
        "shop/api => web/front : All Connections",
        "web/front => 0.0.0.0-255.255.255.255 : All Connections",
        "web/front => shop/api : TCP 8080,UDP 53",
    ]
    assert to_json(m.pairs())["allowed"][-1] == {
        "from": "web/front",
        "to": "shop/api",
        "protocols": {"TCP": [[8080, 8080]], "UDP": [[53, 53]], "SCTP": []},
    }
    # deleting the allow removes exactly that pair's connections
    _, _, changes = what_if([api, front], [deny, allow], ns, delete=["shop/allow"])
    assert [(c.src, c.dst, c.added.empty, c.removed.text()) for c in changes] == [
        ("web/front", "shop/api", True, "TCP 8080,UDP 53")
    ]
    assert diff(m, m) == []
