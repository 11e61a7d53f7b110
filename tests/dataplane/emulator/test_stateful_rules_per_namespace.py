"""A compiled ruleset whose rules keep state of their own (``-m limit``'s token bucket,
``-m statistic --mode nth``'s counter: kube-router's pod chains log through a limit)
is shared through the compiled cache like any other, lazily compiled, yet each
namespace runs its own state: one node's packets never spend another node's bucket."""

from __future__ import annotations

from ipaddress import ip_address
from random import Random

from dataplane.emulator.filters import EngineFilter, compile_rules
from dataplane.emulator.hooks import Skb
from dataplane.netfilter.choice import RandomChooser
from dataplane.netfilter.conntrack import SimClock
from netmodel.packet import Packet
from netmodel.rulesets import IptablesRules, RulesetInput

# a burst of one: the first new packet of a namespace is accepted, the next dropped
LIMITED = IptablesRules(
    "*filter\n"
    ":INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
    "-A INPUT -p tcp -m limit --limit 1/hour --limit-burst 1 -j ACCEPT\n"
    "COMMIT\n",
    source="test",
)


def _filter(name: str, cache: dict[RulesetInput, object]) -> EngineFilter:
    return EngineFilter.build(
        name,
        LIMITED,
        local_addrs=[ip_address("10.0.0.1")],
        iface_addrs={"eth0": [ip_address("10.0.0.1")]},
        clock=SimClock(),
        chooser_box=[RandomChooser(Random(0))],
        cache=cache,  # type: ignore[arg-type]
    )


def _verdict(f: EngineFilter, sport: int) -> str:
    pkt = Packet(
        ip_address("10.0.0.9"), ip_address("10.0.0.1"), "tcp", sport, 80, flags=frozenset({"SYN"})
    )
    return f.run("INPUT", pkt, "eth0", None, Skb(), record=False).verdict


def test_a_limit_is_compiled_lazily_and_shared_but_its_bucket_is_per_namespace() -> None:
    compiled = compile_rules(LIMITED)
    assert compiled.stateful and compiled.compiled is not None
    cache: dict[RulesetInput, object] = {}
    one = _filter("node/one", cache)
    two = _filter("node/two", cache)
    assert len(cache) == 1  # parsed and compiled once for both
    assert _verdict(one, 40000) == "ACCEPT"
    assert _verdict(one, 40001) == "DROP"  # one's bucket is empty
    assert _verdict(two, 40000) == "ACCEPT"  # two's is its own, still full
    assert _verdict(two, 40001) == "DROP"
    # a third namespace built after the others ran starts full as well
    assert _verdict(_filter("node/three", cache), 40000) == "ACCEPT"


def test_a_restored_stateful_ruleset_stays_per_namespace() -> None:
    """What the on-disk compiled cache gives back (a pickle) keeps the flag and its
    laziness: each namespace still runs its own bucket."""
    import pickle

    restored = pickle.loads(pickle.dumps(compile_rules(LIMITED)))
    assert restored.stateful and restored.ruleset is None  # the rules travel compiled
    cache: dict[RulesetInput, object] = {LIMITED: restored}
    one, two = _filter("node/one", cache), _filter("node/two", cache)
    assert [_verdict(one, 40000), _verdict(one, 40001)] == ["ACCEPT", "DROP"]
    assert [_verdict(two, 40000), _verdict(two, 40001)] == ["ACCEPT", "DROP"]
