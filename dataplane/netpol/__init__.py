"""NetworkPolicy as a node's policy agent renders it into netfilter rules.

* :mod:`.kuberouter` — kube-router's layout (the netpol controller k3s embeds):
  :func:`~.kuberouter.render_policy` per node, :class:`~.kuberouter.PolicyRules`,
  :class:`~.kuberouter.RuleOrigin` (which policy and rule made a rule), and
  :func:`~.kuberouter.with_policy` joining them to a node's kube-proxy rules.
"""

from .kuberouter import (
    MARK_ACCEPT,
    MARK_MATCHED,
    PolicyRules,
    RuleOrigin,
    node_policy_rules,
    render_policy,
    with_policy,
)

__all__ = [
    "MARK_ACCEPT",
    "MARK_MATCHED",
    "PolicyRules",
    "RuleOrigin",
    "node_policy_rules",
    "render_policy",
    "with_policy",
]
