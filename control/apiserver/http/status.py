"""``metav1.Status`` errors with kube-apiserver's codes, reasons and wording.

:class:`APIError` is what handlers raise; :func:`from_svclab` turns the apiserver
pipeline's errors (:mod:`netmodel.errors`) into the one kube-apiserver would send for
the same refusal.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from control.apiserver.http.resources import Resource
from netmodel.errors import (
    CompactedError,
    ConflictError,
    InputError,
    InvalidError,
    NotFoundError,
    SchemaError,
    SvclabError,
)
from netmodel.structural import SchemaInvalidError, aggregate


class APIError(Exception):
    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            out["details"] = self.details
        return out


def success(details: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
    }
    if details:
        out["details"] = details
    return out


def _details(res: Resource | None, name: str | None) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if name:
        d["name"] = name
    if res is not None:
        if res.group:
            d["group"] = res.group
        d["kind"] = res.name
    return d


def _qual(res: Resource) -> str:
    return res.qualified()


def unauthorized() -> APIError:
    return APIError(401, "Unauthorized", "Unauthorized")


def not_found(res: Resource, name: str) -> APIError:
    return APIError(404, "NotFound", f'{_qual(res)} "{name}" not found', _details(res, name))


def already_exists(res: Resource, name: str) -> APIError:
    return APIError(
        409, "AlreadyExists", f'{_qual(res)} "{name}" already exists', _details(res, name)
    )


def conflict(res: Resource, name: str, why: str) -> APIError:
    return APIError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qual(res)} "{name}": {why}',
        _details(res, name),
    )


STALE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def bad_request(message: str) -> APIError:
    return APIError(400, "BadRequest", message)


def method_not_allowed(
    message: str = "the server does not allow this method on the requested resource",
) -> APIError:
    return APIError(405, "MethodNotAllowed", message, {})


def gone(message: str) -> APIError:
    return APIError(410, "Expired", message)


def _cause_reason(why: str) -> str:
    for prefix, r in (
        ("Required value", "FieldValueRequired"),
        ("Unsupported value", "FieldValueNotSupported"),
        ("Duplicate value", "FieldValueDuplicate"),
        ("Forbidden", "FieldValueForbidden"),
        ("Too long", "FieldValueTooLong"),
        ("Too many", "FieldValueTooMany"),
    ):
        if why.startswith(prefix):
            return r
    return "FieldValueInvalid"


def invalid(
    res: Resource,
    kind: str,
    name: str,
    field: str | None,
    why: str,
    *,
    causes: Sequence[tuple[str, str]] = (),
) -> APIError:
    """``Service "bad" is invalid: spec.clusterIP: Invalid value: ...`` (422); with
    ``causes`` (several field errors) one cause each and kube's aggregate message
    (``[f1: why1, f2: why2]``). The kind of a grouped resource, built-in or custom, is
    qualified by its group as kube-apiserver's GroupKind prints it
    (``Deployment.apps "web" is invalid``, ``Widget.example.com "bad" is invalid``); a
    core kind stays bare (``Service "web" is invalid``), and so does a kind other than the
    resource's own (``Binding`` on pods)."""
    pairs = list(causes) or [(field or "", why)]
    shown = f"{kind}.{res.group}" if res.group and kind == res.kind else kind
    details = _details(res, name) | {"kind": kind}
    details["causes"] = [
        {"reason": _cause_reason(w), "message": w, "field": f or ""} for f, w in pairs
    ]
    return APIError(422, "Invalid", f'{shown} "{name}" is invalid: {aggregate(pairs)}', details)


def forbidden_object(res: Resource, name: str, why: str) -> APIError:
    return APIError(
        403, "Forbidden", f'{_qual(res)} "{name}" is forbidden: {why}', _details(res, name)
    )


def from_svclab(
    err: SvclabError, res: Resource, kind: str, name: str, *, creating: bool = False
) -> APIError:
    """The Status for an error of the apiserver pipeline on ``res``/``name``."""
    if isinstance(err, NotFoundError):
        return not_found(res, name)
    if isinstance(err, ConflictError):
        text = str(err)
        if creating or "already exists" in text:
            return already_exists(res, name)
        return conflict(res, name, STALE)
    if isinstance(err, CompactedError):
        return gone(str(err))
    if isinstance(err, SchemaError):
        field = err.field or ""
        return bad_request(
            f'{kind} in version "{res.version}" cannot be handled as a {kind}: '
            f'strict decoding error: {err.reason} "{field}"'
            if err.reason == "unknown field"
            else f'{kind} in version "{res.version}" cannot be handled as a {kind}: {field}: {err.reason}'
        )
    if isinstance(err, InvalidError):
        why = err.reason
        if isinstance(err, SchemaInvalidError):
            return invalid(res, kind, name, err.field, why, causes=err.causes)
        if why.startswith("Forbidden: ") and err.field is None:
            return forbidden_object(res, name, why.removeprefix("Forbidden: "))
        return invalid(res, kind, name, err.field, why)
    if isinstance(err, InputError):
        return invalid(res, kind, name, err.field, err.reason)
    return APIError(500, "InternalError", f"Internal error occurred: {err}")
