"""The real-kernel backend: the cluster network on Linux network namespaces.

The only package that touches the kernel (pyroute2, python-iptables, subprocess). Modules,
by layer:

* :mod:`.nsenter` — thread-level ``setns``: create namespaces, open sockets and sysctls
  inside one without forking; records which process created each namespace.
* :mod:`.names` — logical names (``node/n1``) to kernel names
  (``svclab-<cluster>-node-<hash>``); interface-name checks.
* :mod:`.state` — ``/run/svclab/<cluster>/``: CNI results, IPAM data, pid files.
* :mod:`.links` — ensure-style netlink operations in one namespace.
* :mod:`.netns` — namespace create/remove/run-a-tool-inside (used by tests' fixture).
* :mod:`.cni` — :class:`~.cni.CniRunner`: pods through the real CNI plugins.
* :mod:`.realize` — :func:`~.realize.realize` / :func:`~.realize.teardown` /
  :func:`~.realize.cleanup` a :class:`~netmodel.network.ClusterNetwork`;
  :class:`~.realize.RealCluster`.
* :mod:`.rules` — load iptables-restore payloads (iptables-nft or iptables-legacy back
  end) / nft text, read counters back.
* :mod:`.legacy` — the legacy back end's rules and counters read through libiptc
  (python-iptables), in iptables-save form.
* :mod:`.conntrack` — ``conntrack -L`` read back and parsed.
* :mod:`.podserver` (standalone script) and :mod:`.servers` — the pod servers.
* :mod:`.traffic` — ``connect`` and ``ping`` from inside a namespace.
* :mod:`.inspect` — a namespace's links, addresses, routes, neighbours, FDB as text.
* :mod:`.testing` — sample network, realise-and-remove context manager, leftover check.

Nothing is re-exported here on purpose: importing the package stays cheap, and the
function :func:`~.realize.realize` would shadow its own module.
"""
