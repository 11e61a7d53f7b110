"""The network tools of an emulated pod, answered by the emulator: the command layer
``kubectl exec`` calls on the emulator, and ``svclab exec``.

``run(world, pod, argv, env) -> (exit_code, stdout, stderr)`` (bytes) runs one command
in pod ``pod`` (:class:`PodTarget`, made by :func:`pod_target`) of the emulated cluster
``world`` (:class:`Emulated`):

=====================  ========================================================
``curl``, ``wget``     HTTP through the emulated dataplane (DNS, kube-proxy's rules,
                       the overlay) to the pod server model (:mod:`.podserver`)
``nc``, ``ping``       a TCP connection (``-z``: no data), ICMP echo
``nslookup``, ``dig``  questions to cluster DNS, walked like any packet
``getent hosts``       glibc's lookup: /etc/hosts, then DNS with the search list
``ip addr|route|neigh|rule``  the pod's namespace as iproute2 prints it
``cat /etc/resolv.conf|/etc/hosts``, ``hostname``  what kubelet writes
``iptables-save``, ``nft list ruleset``, ``ipvsadm -Ln``, ``ipset list``,
``conntrack -L``       host-network pods only: the node's rules and conntrack table
=====================  ========================================================

Each tool's output is byte-compatible with the real tool's usual output (the version
each module names; recordings with provenance in ``tests/data/podtools/``). What only
the emulator can tell is appended to stderr, each line starting ``* svclab:``, with
curl's ``-v``/``--trace`` or ``SVCLAB_TRACE=1`` in ``env``: how the name was resolved,
the Service, the endpoint and the rule that chose it, the source the server saw, every
hop. Unasked, one thing is added: when a NetworkPolicy refused a connection, a
``* svclab: refused by policy ...`` line per deciding rule (the words of a trace's
``netpol`` hop) after the tool's own output. Any other command exits 127 (``sh: CMD: not found in an emulated pod (...)``);
``sh -c 'ONE COMMAND'`` runs one simple command. An option a tool's emulation does not
evaluate is refused with a ``svclab:`` message, never ignored. The pod servers'
answers are logged in ``world.access_log``, with the client address and port they saw.

Differential use on the real backend: ``argv`` is a plain argument vector, exactly what
``kubectl exec POD -- ARGV`` passes and what ``ip netns exec <pod netns> ARGV`` runs, with
kubelet's ``/etc/resolv.conf`` and ``/etc/hosts`` as ``/etc/netns/<netns>/`` files (which
``ip netns exec`` bind-mounts over ``/etc``: :attr:`PodTarget.hosts` and
``PodTarget.resolv_conf.render()`` are their contents). A differential test runs the same
argv both ways and compares the bytes after masking what differs between any two runs
of the real tool (ephemeral ports, timings, DNS message ids, dig's ``WHEN``): the
recordings in ``tests/data/podtools/`` were taken that way (``record.py`` there).
Differences that remain by design: ``ip addr`` prints ``link-netnsid 0`` (what a
pod of a real cluster sees of its node's unnamed namespace) where a named node
namespace prints ``link-netns NAME``; interface indexes follow the model's order.
"""

from dataplane.podtools.net import Emulated, Lookup, lookup
from dataplane.podtools.podserver import LogLine
from dataplane.podtools.shell import NODE_TOOLS, NOT_FOUND, POD_TOOLS, run
from dataplane.podtools.target import PodTarget, hosts_file, pod_target

__all__ = [
    "NODE_TOOLS",
    "NOT_FOUND",
    "POD_TOOLS",
    "Emulated",
    "LogLine",
    "Lookup",
    "PodTarget",
    "hosts_file",
    "lookup",
    "pod_target",
    "run",
]
