"""The "connect" subresources: those kube-apiserver serves by reaching a node or the
cluster network rather than the store (``pods/exec``, ``attach``, ``portforward``,
``log``, ``proxy``; ``services/proxy``; ``nodes/proxy``), and the checks they share.

:data:`HANDLERS` maps ``(resource, subresource)`` to the coroutine that answers a plain
HTTP request for it (a WebSocket request is answered by the streaming layer);
:func:`handlers.handle` looks there first. The subresource of a proxy request keeps
its path (``proxy/some/path``): the key is its first segment.

:func:`pod_container` is kube-apiserver's check before it forwards a request to the
pod's kubelet (its ``streamLocation``), with its wording: the pod exists, is scheduled,
and the container named is one of its containers (or the only one, when none is
named). What kubelet then answers (the container is not running) is
:func:`running`'s.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from control.apiserver.http import status
from control.apiserver.http.status import APIError
from netmodel.errors import NotFoundError
from netmodel.objects import Pod

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from control.apiserver.http.app import API, RequestInfo
    from control.apiserver.http.authn import User

Handler = Callable[
    ["API", "Request", "RequestInfo", "User", dict[str, list[str]]], Awaitable["Response"]
]

#: (resource, first segment of the subresource) -> its plain-HTTP handler
HANDLERS: dict[tuple[str, str], Handler] = {}


def pod_of(api: API, namespace: str, name: str) -> Pod:
    """The stored pod, or kube-apiserver's 404 ``pods "NAME" not found``."""
    try:
        pod = api.get("Pod", f"{namespace}/{name}")
    except NotFoundError:
        raise APIError(
            404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"}
        ) from None
    assert isinstance(pod, Pod)
    return pod


def container_names(pod: Pod) -> list[str]:
    """The pod's containers, then its ephemeral containers (as stored)."""
    return [c.name for c in pod.spec.containers] + [
        c.name for c in pod.spec.ephemeral_containers
    ]


def pod_container(api: API, namespace: str, name: str, container: str) -> tuple[Pod, str]:
    """The pod and the container a stream goes to (``container`` empty: the pod's only
    container), with kube-apiserver's refusals (400 BadRequest):

    * ``a container name must be specified for pod NAME, choose one of: [A B]``;
    * ``container C is not valid for pod NAME``;
    * ``pod NAME does not have a host assigned``.
    """
    pod = pod_of(api, namespace, name)
    names = container_names(pod)
    if not container:
        regular = [c.name for c in pod.spec.containers]
        if len(regular) == 1:
            container = regular[0]
        else:
            raise status.bad_request(
                f"a container name must be specified for pod {name}, "
                f"choose one of: [{' '.join(regular)}]"
            )
    elif container not in names:
        raise status.bad_request(f"container {container} is not valid for pod {name}")
    if not pod.spec.node_name:
        raise status.bad_request(f"pod {name} does not have a host assigned")
    return pod, container


def running(pod: Pod, container: str) -> None:
    """kubelet's refusal to stream to a container that is not running:
    ``container not found ("C")`` (kubectl prints it after ``unable to upgrade
    connection:``), and ``pod does not exist`` for a pod its node does not run."""
    if pod.is_terminating and pod.status.phase not in ("Running", None):
        raise APIError(404, "NotFound", "pod does not exist", {})
    if pod.status.phase != "Running":
        raise APIError(404, "NotFound", f'container not found ("{container}")', {})


def query(params: dict[str, list[str]], name: str, default: str = "") -> str:
    v = params.get(name)
    return v[0] if v else default


def flag(params: dict[str, list[str]], name: str, default: bool = False) -> bool:
    """A boolean query parameter as kube-apiserver converts one into its options
    (apimachinery's ``Convert_Slice_string_To_bool``): absent, ``default``; ``0`` or
    ``false`` (any case), false; anything else, the empty string included, true."""
    v = params.get(name)
    if not v:
        return default
    return not (v[0] == "0" or v[0].lower() == "false")


def stream_flags(params: dict[str, list[str]]) -> tuple[bool, bool, bool, bool]:
    """``(stdin, stdout, stderr, tty)`` of an exec or attach, with kube-apiserver's
    defaults for PodExecOptions and PodAttachOptions (stdout and stderr on)."""
    return (
        flag(params, "stdin"),
        flag(params, "stdout", True),
        flag(params, "stderr", True),
        flag(params, "tty"),
    )


def command(params: dict[str, list[str]]) -> tuple[str, ...]:
    """The ``command`` parameters of an exec, in order (kubectl sends one per
    argument); 400 ``you must specify at least 1 command`` without one."""
    cmd = tuple(params.get("command") or ())
    if not cmd:
        raise status.bad_request("you must specify at least 1 command")
    return cmd
