"""Name and label checks with Kubernetes' wording (apimachinery ``validation``).

Each ``check_*`` returns ``None`` when the value is valid, else the reason text that
follows ``Invalid value: "<value>": `` in a Kubernetes error.
"""

from __future__ import annotations

import re

DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN_FMT = DNS1123_LABEL_FMT + r"(\." + DNS1123_LABEL_FMT + ")*"
DNS1035_LABEL_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_VALUE_FMT = "(" + QUALIFIED_NAME_FMT + ")?"

_DNS1123_LABEL = re.compile(DNS1123_LABEL_FMT)
_DNS1123_SUBDOMAIN = re.compile(DNS1123_SUBDOMAIN_FMT)
_DNS1035_LABEL = re.compile(DNS1035_LABEL_FMT)
_QUALIFIED_NAME = re.compile(QUALIFIED_NAME_FMT)
_LABEL_VALUE = re.compile(LABEL_VALUE_FMT)
_IANA_SVC_NAME = re.compile("[-a-z0-9]+")
_HAS_LETTER = re.compile("[a-z]")


def _max_len(n: int) -> str:
    return f"must be no more than {n} characters"


def check_dns1123_label(value: str) -> str | None:
    if len(value) > 63:
        return _max_len(63)
    if not _DNS1123_LABEL.fullmatch(value):
        return (
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters "
            "or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  "
            f"or '123-abc', regex used for validation is '{DNS1123_LABEL_FMT}')"
        )
    return None


def check_dns1123_subdomain(value: str) -> str | None:
    if len(value) > 253:
        return _max_len(253)
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        return (
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
            "characters, '-' or '.', and must start and end with an alphanumeric character "
            f"(e.g. 'example.com', regex used for validation is '{DNS1123_SUBDOMAIN_FMT}')"
        )
    return None


def check_dns1035_label(value: str) -> str | None:
    if len(value) > 63:
        return _max_len(63)
    if not _DNS1035_LABEL.fullmatch(value):
        return (
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
            "start with an alphabetic character, and end with an alphanumeric character "
            f"(e.g. 'my-name',  or 'abc-123', regex used for validation is "
            f"'{DNS1035_LABEL_FMT}')"
        )
    return None


def check_qualified_name(value: str) -> str | None:
    """A label or annotation key: optional DNS-1123 subdomain prefix, ``/``, name."""
    prefix, sep, name = value.rpartition("/")
    if sep and not prefix:
        return "prefix part must be non-empty"
    if prefix:
        why = check_dns1123_subdomain(prefix)
        if why:
            return "prefix part " + why
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part " + _max_len(63)
    if not _QUALIFIED_NAME.fullmatch(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must "
            "start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  "
            f"or '123-abc', regex used for validation is '{QUALIFIED_NAME_FMT}')"
        )
    return None


def check_label_value(value: str) -> str | None:
    if len(value) > 63:
        return _max_len(63)
    if not _LABEL_VALUE.fullmatch(value):
        return (
            "a valid label must be an empty string or consist of alphanumeric characters, "
            "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. "
            "'MyValue',  or 'my_value',  or '12345', regex used for validation is "
            f"'{LABEL_VALUE_FMT}')"
        )
    return None


def check_port_name(value: str) -> str | None:
    """An IANA_SVC_NAME (RFC 6335): container port names and named targetPorts."""
    if len(value) > 15:
        return _max_len(15)
    if not _IANA_SVC_NAME.fullmatch(value):
        return "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"
    if "--" in value:
        return "must not contain consecutive hyphens"
    if not _HAS_LETTER.search(value):
        return "must contain at least one letter (a-z)"
    if value.startswith("-") or value.endswith("-"):
        return "must not begin or end with a hyphen"
    return None


def check_path_segment(value: str) -> str | None:
    """Kubernetes' ValidatePathSegmentName: the names of RBAC objects (``system:node``)."""
    if value in (".", ".."):
        return f"may not be '{value}'"
    for bad in ("/", "%"):
        if bad in value:
            return f"may not contain '{bad}'"
    return None


def quote(value: object) -> str:
    """A value as Kubernetes prints it in ``Invalid value: ...`` (Go's %q for strings)."""
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        inner = ", ".join(f"{quote(k)}: {quote(v)}" for k, v in value.items())
        return "{" + inner + "}"
    if isinstance(value, list):
        return "[" + ", ".join(quote(v) for v in value) + "]"
    return str(value)
