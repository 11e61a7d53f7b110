"""The emulated policy agent keeps each node's kube-router rendering (and the guarded
set) in the state directory's cache while the store is unchanged: a question on an
unchanged cluster reads no NetworkPolicy and renders nothing, and gets what rendering
from the store gives; after a change it renders again, never the stale rules."""

from __future__ import annotations

from pathlib import Path

from app import emulation
from control.session import Session
from netmodel.manifests import load

ROOT = Path(__file__).resolve().parents[2]

DENY = """
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny}
spec: {podSelector: {}, policyTypes: [Ingress]}
"""
ALLOW = """
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow-web}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress: [{ports: [{port: http}]}]
"""


def _apply(state: Path, text: str, tmp: Path, name: str) -> None:
    src = tmp / f"{name}.yaml"
    src.write_text(text)
    s = Session.open(state, must_exist=False)
    try:
        s.apply(load([src]))
    finally:
        s.close()


def _nodes(state: Path) -> list[str]:
    s = Session.open(state, read_only=True)
    try:
        return sorted(n.name for n in s.store.list("Node"))
    finally:
        s.close()


def _check(state: Path) -> None:
    """A fresh agent over ``state``: its renderings and guarded set equal the uncached
    agent's, and made a second time they come from the cache (no input read)."""
    s = Session.open(state, read_only=True)
    try:
        reference = emulation.policy_agent_of(s, cached=False)
        assert reference is not None
        nodes = sorted(reference.node_ips)
        first = emulation.policy_agent_of(s)
        assert first is not None
        for node in nodes:
            assert first.rules(node) == reference.rules(node)
        assert first.guarded() == reference.guarded()
        again = emulation.policy_agent_of(s)
        assert again is not None
        for node in nodes:
            assert again.rules(node) == reference.rules(node)
        assert again.guarded() == reference.guarded()
        assert again._inputs is None, "the cached agent read the store's policies"
    finally:
        s.close()


def test_renderings_are_kept_while_the_store_is_unchanged(tmp_path: Path) -> None:
    state = tmp_path / "state"
    web = (ROOT / "examples" / "web.yaml").read_text()
    _apply(state, web + "---\n" + DENY, tmp_path, "web")
    assert len(_nodes(state)) == 3
    _check(state)
    # a change: the allow lets web's http in; the kept renderings must not be reused
    _apply(state, ALLOW, tmp_path, "allow")
    _check(state)
    s = Session.open(state, read_only=True)
    try:
        agent = emulation.policy_agent_of(s)
        assert agent is not None
        assert any("allow-web" in r for n in agent.node_ips for r in agent.rules(n).rules)
    finally:
        s.close()


def test_no_policy_no_agent_and_no_pod_read(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _apply(state, (ROOT / "examples" / "web.yaml").read_text(), tmp_path, "web")
    s = Session.open(state, read_only=True)
    try:
        assert emulation.policy_agent_of(s) is None
        assert emulation.policy_agent_of(s, cached=False) is None
    finally:
        s.close()
