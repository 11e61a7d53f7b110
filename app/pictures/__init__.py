"""Pictures of a cluster: pure functions from svclab's values to a ``graphviz.Digraph``,
a matplotlib ``Figure`` or text, and one module that writes them to files.

Modules (each small, each pure except :mod:`~app.pictures.files`):

* :mod:`~app.pictures.scene` — what a picture shows, gathered from a session: nodes,
  pods, Services with their endpoints, the network namespaces (the only module that
  reads the store).
* :mod:`~app.pictures.topology` — the cluster as a graph: underlay, nodes with eth0,
  cni0, flannel.1 (or host-gw routes), pod veths and pod IPs, Services pointing at their
  endpoints.
* :mod:`~app.pictures.path` — a trace's hops as a path over that graph: numbered
  hops, the DNAT rule, the masquerade, the encapsulation, the reply.
* :mod:`~app.pictures.timeline` — the event timeline as a sequence of messages
  between lanes (kubectl, apiserver, store, controllers, scheduler, kubelets,
  kube-proxies), and the ``--for`` filter that keeps what one object caused.
* :mod:`~app.pictures.sequence` — that sequence drawn by Graphviz, or as Mermaid text.
* :mod:`~app.pictures.shares` — a connect run's per-endpoint shares with Wilson
  intervals and the chi-square result (matplotlib).
* :mod:`~app.pictures.report` — one self-contained HTML page.
* :mod:`~app.pictures.files` — the edge: write a picture to ``.svg``/``.png``/``.mmd``.

Graphviz and matplotlib are imported by these modules; the CLI imports them inside its
commands only, so that ``svclab --help`` stays cheap.
"""
