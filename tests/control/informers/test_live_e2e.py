"""End to end against a real ``svclab serve`` subprocess: its controllers, scheduler,
kubelets and kube-proxies are API clients with their own identities. kubectl writes;
nothing else drives the control plane."""

from __future__ import annotations

import json
import re
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from serve_helpers import ROOT, Served, free_port, serve, svclab_cmd, wait_for

from control.apiserver.http import pki
from control.informers import Reflector, SharedInformer
from control.informers.http import AccessError, Credentials, HTTPListerWatcher, KubeClient
from netmodel.errors import CompactedError
from netmodel.kinds import object_from_dict
from netmodel.objects import Deployment, Pod, Service

pytestmark = pytest.mark.slow

APP = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {app: web}}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: nginx
        ports: [{name: http, containerPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
"""

BOUND = 30.0  # seconds the live control plane gets to converge a small change
#: the longest a reflector's watch request lasts (the live plane's watch timeout)
WATCH_TIMEOUT = 30.0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    # a short watch history, compacted often: watches from old revisions get 410 Gone
    with serve(
        tmp_path_factory.mktemp("serve"), "--watch-history", "5", "--compact-every", "0.3"
    ) as s:
        yield s


def client_as(s: Served, user: str, *groups: str) -> KubeClient:
    ca = pki.load_ca(s.state / "pki")
    cert, key = pki.client_cert(ca, user, list(groups))
    return KubeClient(Credentials(s.server, ca.pem, cert, key), user_agent="e2e-test")


def kjson(s: Served, *args: str) -> dict[str, Any]:
    proc = s.kubectl(*args, "-o", "json")
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def sep_rules(s: Served, node: str) -> list[str]:
    proc = s.svclab("rules", "--node", node)
    assert proc.returncode == 0, proc.stderr
    return re.findall(
        r'-A KUBE-SEP-\w+ .*"default/web:http" .*-j DNAT --to-destination (\S+)', proc.stdout
    )


def test_kubectl_apply_converges_with_no_cli_command_driving_it(served: Served) -> None:
    s = served
    out = s.kubectl("apply", "-f", "-", stdin=APP)
    assert out.returncode == 0, out.stderr

    def running() -> set[str] | None:
        pods = kjson(s, "get", "pods", "-l", "app=web")["items"]
        ok = [
            p
            for p in pods
            if p["status"].get("phase") == "Running"
            and p["spec"].get("nodeName")
            and p["status"].get("podIP")
        ]
        return {p["status"]["podIP"] for p in ok} if len(ok) == 2 == len(pods) else None

    ips = wait_for(running, BOUND, "2 web pods scheduled and Running")

    def slices() -> bool:
        items = kjson(s, "get", "endpointslices", "-l", "kubernetes.io/service-name=web")["items"]
        got = {a for sl in items for e in sl.get("endpoints") or [] for a in e["addresses"]}
        return got == ips

    wait_for(slices, BOUND, "the EndpointSlice lists both pods")
    ep = kjson(s, "get", "endpoints", "web")
    assert {a["ip"] for sub in ep["subsets"] for a in sub["addresses"]} == ips
    # kube-proxy's rules (svclab rules reads the served state directory)
    wait_for(
        lambda: {r.split(":")[0] for r in sep_rules(s, "node-1")} == ips,
        BOUND,
        "node-1's rules DNAT to both pods",
    )
    # each component logged its steps under its own name
    log = s.log_text()
    for name in (
        "deployment-controller",
        "replicaset-controller",
        "default-scheduler",
        "endpointslice-controller",
        "kubelet/node-1",
        "kubelet/node-2",
    ):
        assert f"component={name} synced=" in log, name
    assert re.search(
        r"component=kube-proxy/node-1 synced=\d+ .* mode=iptables payload_lines=\d+", log
    )
    # the pods were bound by the scheduler's Binding, its decision on the pod
    pod = kjson(s, "get", "pods", "-l", "app=web")["items"][0]
    assert "svclab.dev/scheduling" in json.dumps(pod["metadata"].get("annotations", {}))


def test_scaling_reaches_every_node_and_the_cli_reads_a_consistent_state(served: Served) -> None:
    s = served
    wait_for(lambda: len(sep_rules(s, "node-1")) == 2, BOUND, "the deployment of the first test")
    assert s.kubectl("scale", "deployment/web", "--replicas=4").returncode == 0
    seen: list[int] = []

    def four() -> bool:
        # CLI commands run while the server's components write: each sees a committed
        # state, never more web pods than asked for
        got = json.loads(s.svclab("get", "pods", "-o", "json").stdout)
        web = [p for p in got["items"] if p["metadata"]["name"].startswith("web-")]
        seen.append(len(web))
        return len(sep_rules(s, "node-2")) == 4

    wait_for(four, BOUND, "node-2's rules DNAT to 4 pods")
    assert max(seen) <= 4
    out = s.kubectl("rollout", "status", "deployment/web", "--timeout=30s")
    assert out.returncode == 0, out.stderr
    # a write from another process (the CLI, on the store) reaches the components too
    extra = s.state.parent / "svc2.yaml"
    extra.write_text(APP.split("---\n")[1].replace("name: web}", "name: web2}"))
    assert s.svclab("apply", "-f", str(extra)).returncode == 0
    wait_for(
        lambda: kjson(s, "get", "endpointslices", "-l", "kubernetes.io/service-name=web2")["items"],
        BOUND,
        "the EndpointSlice controller saw the Service the CLI stored",
    )


def test_a_component_identity_is_refused_what_it_may_not_do(served: Served) -> None:
    s = served
    node1 = client_as(s, "system:node:node-1", "system:nodes")
    try:
        with pytest.raises(AccessError) as e:
            node1.list("Pod")  # all pods: only its own, by field selector
        assert e.value.code == 403
        assert 'User "system:node:node-1" cannot list resource "pods"' in str(e.value)
        mine = node1.list("Pod", field_selector="spec.nodeName=node-1")
        assert all(isinstance(p, Pod) and p.spec.node_name == "node-1" for p in mine.objects)
        # a pod bound to the other node: its status is not node-1's to write
        s.kubectl(
            "apply",
            "-f",
            "-",
            stdin="apiVersion: v1\nkind: Pod\nmetadata: {name: elsewhere}\n"
            "spec: {nodeName: node-2, containers: [{name: c, image: nginx}]}\n",
        )
        other = object_from_dict(kjson(s, "get", "pod", "elsewhere"))
        with pytest.raises(AccessError) as e:
            node1.update_status(other)
        assert e.value.code == 403
    finally:
        node1.close()
    scheduler = client_as(s, "system:kube-scheduler")
    proxy = client_as(s, "system:kube-proxy")
    try:
        dep = object_from_dict(kjson(s, "get", "deployment", "web"))
        assert isinstance(dep, Deployment)
        with pytest.raises(AccessError) as e:
            scheduler.create(dep.with_meta(name="not-mine", resource_version=None, uid=None))
        assert e.value.code == 403
        svc = proxy.get("Service", "default/web")
        assert isinstance(svc, Service)
        with pytest.raises(AccessError) as e:
            proxy.update(svc.with_meta(labels={"x": "y"}))
        assert e.value.code == 403
    finally:
        scheduler.close()
        proxy.close()


def test_reflector_relists_after_the_server_compacted_its_watch_log(served: Served) -> None:
    s = served
    cm = client_as(s, "system:kube-controller-manager")
    try:
        inf = SharedInformer("Service")
        seen: list[tuple[str, str]] = []
        inf.add_handler(lambda evs: seen.extend((e.type, e.object.name) for e in evs))
        ref = Reflector(HTTPListerWatcher(cm), inf, watch_timeout=1)
        ref.step()  # list
        listed = ref.revision
        assert listed is not None and ("ADDED", "web") in seen
        for i in range(8):  # more writes than the server keeps (--watch-history 5)
            out = s.kubectl("annotate", "svc", "web", f"n={i}", "--overwrite")
            assert out.returncode == 0, out.stderr

        def gone() -> bool:
            try:
                list(cm.watch("Service", listed, timeout=1))
            except CompactedError:
                return True
            return False

        wait_for(gone, BOUND, "the server compacted past the listing")
        seen.clear()
        ref.step()  # the watch: 410 Gone
        assert ref.gone == 1 and ref.revision is None
        ref.step()  # relist: the gap becomes one MODIFIED
        assert ref.lists == 2 and ("MODIFIED", "web") in seen
        web = inf.cache.get("Service", "default/web")
        assert web is not None and web.metadata.annotations["n"] == "7"
        # and it watches on from the new listing
        assert s.kubectl("annotate", "svc", "web", "n=8", "--overwrite").returncode == 0
        wait_for(
            lambda: (
                ref.step()
                or inf.cache.get("Service", "default/web").metadata.annotations["n"] == "8"
            ),
            BOUND,
            "the watch after the relist",
        )  # type: ignore[union-attr]
    finally:
        cm.close()


def test_a_stopped_reflector_ends_its_idle_watch_without_waiting_for_its_timeout(
    served: Served,
) -> None:
    # a deleted node's kube-proxy Node watch is idle: nothing but bookmarks come on it
    s = served
    cm = client_as(s, "system:kube-controller-manager")
    try:
        inf = SharedInformer("Node", field_selector="metadata.name=node-1")
        ref = Reflector(HTTPListerWatcher(cm), inf, watch_timeout=600)
        stop = threading.Event()
        t = threading.Thread(target=ref.run, args=(stop,), daemon=True)
        t.start()
        wait_for(lambda: inf.synced.is_set() and ref.watches > 0, BOUND, "listed, watching")
        stop.set()
        t.join(BOUND)  # the server's bookmarks come every few seconds; the timeout is 600 s
        assert not t.is_alive(), "the reflector kept its watch open after stop"
    finally:
        cm.close()


def test_deleting_a_namespace_empties_it_then_removes_it(served: Served) -> None:
    # namespace controller (deletes the content), kubelets (finalize the pods), the
    # namespaces/finalize subresource: all over the API
    s = served
    assert s.kubectl("create", "namespace", "team").returncode == 0
    out = s.kubectl("-n", "team", "create", "deployment", "app", "--image=nginx", "--replicas=2")
    assert out.returncode == 0, out.stderr
    out = s.kubectl("-n", "team", "rollout", "status", "deployment/app", "--timeout=30s")
    assert out.returncode == 0, out.stderr
    out = s.kubectl("delete", "namespace", "team", "--timeout=30s")  # waits until gone
    assert out.returncode == 0, out.stderr
    gone = s.kubectl("get", "namespace", "team")
    assert gone.returncode == 1 and 'namespaces "team" not found' in gone.stderr


def _web_pods(s: Served) -> dict[str, str]:
    pods = json.loads(s.svclab("get", "pods", "-o", "json").stdout)["items"]
    return {
        p["metadata"]["name"]: p["status"].get("podIP", "")
        for p in pods
        if p["metadata"]["name"].startswith("web-")
    }


def test_the_server_stops_cleanly_and_a_restart_continues(served: Served) -> None:
    # last in the module: SIGTERM ends the components and the server with exit 0
    s = served
    before = _web_pods(s)
    s.proc.terminate()
    assert s.proc.wait(timeout=30) == 0, s.log_text()[-3000:]
    assert "stopped; state saved" in s.log_text()
    stopped = _web_pods(s)
    assert len(stopped) == 4 and stopped == before
    # a new server on the same state: the components resync from the store and find
    # nothing to do (same pods, same addresses, no new pod)
    port = free_port()
    log = s.state.parent / "serve2.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*svclab_cmd(), "--state", str(s.state), "serve", "--listen", f"127.0.0.1:{port}"],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    try:
        wait_for(
            lambda: "component=kube-proxy/node-2 started" in log.read_text(),
            BOUND,
            "the restarted server's components start",
        )
        s2 = Served(s.state, port, proc, log)
        assert s2.kubectl("scale", "deployment/web", "--replicas=5").returncode == 0
        wait_for(lambda: len(_web_pods(s2)) == 5 and all(_web_pods(s2).values()), BOUND, "scale")
        after = _web_pods(s2)
        assert {k: v for k, v in after.items() if k in before} == before
        assert len(set(after.values())) == 5  # the new pod got an address nobody holds
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_a_deleted_nodes_kubelet_and_kube_proxy_stop(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # its own server: the module's keeps both nodes
    with serve(tmp_path_factory.mktemp("serve-node")) as s:
        wait_for(
            lambda: "component=kube-proxy/node-2 started" in s.log_text(),
            BOUND,
            "node-2's components start",
        )
        out = s.kubectl("delete", "node", "node-2")
        assert out.returncode == 0, out.stderr
        stopped = [
            "component=kubelet/node-2 stopped",
            "component=kube-proxy/node-2 stopped",
            "reflector=system:node:node-2/Node[metadata.name=node-2] stopped",
            "reflector=system:node:node-2/Pod[spec.nodeName=node-2] stopped",
            # the kube-proxy's Node watch (a shared connection) ends at its next bookmark
            "reflector=system:kube-proxy/Node[metadata.name=node-2] stopped",
        ]
        try:
            # at the next event or bookmark of each watch, and at the latest when the
            # watch's own 30 s timeout ends it (seen once under load: the Pod watch of
            # node-2's kubelet outlived its bookmarks; not explained yet)
            wait_for(
                lambda: all(line in s.log_text() for line in stopped),
                WATCH_TIMEOUT + BOUND,
                "node-2's components and their watches stop",
            )
        except AssertionError as e:
            text = s.log_text()
            missing = [line for line in stopped if line not in text]
            tail = "\n".join(text.splitlines()[-40:])
            raise AssertionError(f"{e}: missing {missing}; the log ends:\n{tail}") from None
        log = s.log_text()
        assert "node-1 stopped" not in log
        # node-1 keeps working: a new pod there is run by its kubelet
        out = s.kubectl("create", "deployment", "one", "--image=nginx", "--replicas=1")
        assert out.returncode == 0, out.stderr
        out = s.kubectl("rollout", "status", "deployment/one", "--timeout=30s")
        assert out.returncode == 0, out.stderr
