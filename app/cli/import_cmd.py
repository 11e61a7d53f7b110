"""``svclab import --kubeconfig FILE [--context NAME]``: read a live cluster's objects
through the Kubernetes API (the official client) and apply them as ``apply -f`` applies
a ``kubectl get -A -o yaml`` dump (:mod:`netmodel.kubedump`): Nodes, Namespaces,
Services, EndpointSlices, Deployments, ReplicaSets, Pods, the kube-proxy ConfigMap
(its mode) and ServiceCIDRs where the server has them. A progress bar (rich, on
stderr) counts the kinds read. Read-only towards the cluster.
"""

from __future__ import annotations

from typing import Any

import click

from app.cli.context import Context, handle_errors

__all__ = ["COMMANDS"]

#: (kind, apiVersion, client API class, list method) read in this order
_LISTS = (
    ("Node", "v1", "CoreV1Api", "list_node"),
    ("Namespace", "v1", "CoreV1Api", "list_namespace"),
    ("Service", "v1", "CoreV1Api", "list_service_for_all_namespaces"),
    (
        "EndpointSlice",
        "discovery.k8s.io/v1",
        "DiscoveryV1Api",
        "list_endpoint_slice_for_all_namespaces",
    ),
    ("Deployment", "apps/v1", "AppsV1Api", "list_deployment_for_all_namespaces"),
    ("ReplicaSet", "apps/v1", "AppsV1Api", "list_replica_set_for_all_namespaces"),
    ("Pod", "v1", "CoreV1Api", "list_pod_for_all_namespaces"),
)


def read_cluster(kubeconfig: str, context: str | None) -> list[dict[str, Any]]:
    """Every object svclab models, as the API serves them (dicts in wire form)."""
    import logging

    import urllib3
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException
    from rich.progress import Progress

    from netmodel.errors import InputError

    logging.getLogger("urllib3").setLevel(logging.ERROR)  # one line on failure, not retries
    try:
        api = config.new_client_from_config(config_file=kubeconfig, context=context)
    except (config.ConfigException, OSError, KeyError, ValueError) as e:
        raise InputError(f"cannot use kubeconfig: {e}", file=kubeconfig) from None
    items: list[dict[str, Any]] = []
    with Progress(transient=True, console=None) as progress:
        task = progress.add_task("reading the cluster", total=len(_LISTS) + 1)
        for kind, version, cls, method in _LISTS:
            progress.update(task, description=f"reading {kind}s")
            try:
                result = getattr(getattr(client, cls)(api), method)()
            except ApiException as e:
                raise InputError(
                    f"{kind} list failed: {e.status} {e.reason}", file=kubeconfig
                ) from None
            except (OSError, urllib3.exceptions.HTTPError) as e:
                why = getattr(e, "reason", None) or e
                raise InputError(
                    f"cannot reach the API server {api.configuration.host}: {why}", file=kubeconfig
                ) from None
            for obj in result.items:
                d = api.sanitize_for_serialization(obj)
                d["kind"], d["apiVersion"] = kind, version
                items.append(d)
            progress.advance(task)
        progress.update(task, description="reading the kube-proxy ConfigMap")
        try:
            cm = client.CoreV1Api(api).read_namespaced_config_map("kube-proxy", "kube-system")
            d = api.sanitize_for_serialization(cm)
            d["kind"], d["apiVersion"] = "ConfigMap", "v1"
            items.append(d)
        except ApiException as e:
            if e.status not in (403, 404):
                raise InputError(f"ConfigMap read failed: {e.status} {e.reason}") from None
        progress.advance(task)
    return items


@click.command("import")
@click.option("--kubeconfig", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--context", default=None, help="Context to use (default: current-context)")
@click.pass_obj
@handle_errors
def import_cmd(ctx: Context, kubeconfig: str, context: str | None) -> None:
    """Read a live cluster's objects through the Kubernetes API and apply them here."""
    import yaml

    from netmodel.manifests import load_text

    items = read_cluster(kubeconfig, context)
    text = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items})
    source = f"{kubeconfig}" + (f" (context {context})" if context else "")
    manifests = load_text(text, source=source)
    from control.session import Session

    if manifests.skipped:
        kinds = ", ".join(f"{n} {k}" for k, n in manifests.skipped)
        click.echo(f"skipped objects of kinds svclab does not model: {kinds}", err=True)
    for note in manifests.warnings:
        click.echo(f"warning: {note}", err=True)
    session = Session.open(ctx.state, must_exist=False)
    session.proxies_from_store = True  # as apply: rules are rendered from the store
    try:
        results = session.apply(manifests)
    finally:
        session.close()
    for verb, obj in results:
        click.echo(f"{obj.kind.lower()}/{obj.name} {verb}")


COMMANDS = [import_cmd]
