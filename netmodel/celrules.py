"""CEL validation rules (``x-kubernetes-validations``) of a CRD's structural schema.

Each schema node may carry a list of rules ``{rule, message, messageExpression,
reason, fieldPath, optionalOldSelf}``. kube-apiserver compiles them when the CRD is
written (a rule that does not compile refuses the CRD) and evaluates them on every
create and update of a custom resource, ``self`` bound to the value at the node
(absent or null values are not checked), ``oldSelf`` to the stored value at the same
place on an update (a rule naming ``oldSelf``, a *transition rule*, is skipped where
there is no old value, so always on a create).

Evaluation is cel-python's (``celpy``), plus the Kubernetes network library's string
check ``isCIDR(string)`` (:data:`K8S_FUNCTIONS`: Go's ``netip.ParsePrefix`` grammar,
zones and IPv4-mapped IPv6 addresses refused, as kube's library refuses them; what the
network-policy-api's CRD uses). Functions of the Kubernetes CEL libraries that svclab
does not implement (``quantity``, ``url``, ``isSorted``, ``isIP``, ``cidr``...) and
``optionalOldSelf`` (CEL optionals) are refused at CRD time, never accepted and
skipped: :func:`rule_problems` says which.

Causes are ``(field path, message)`` in kube-apiserver's wording:
``spec: Invalid value: "object": failed rule: self.minReplicas <= self.replicas``;
``reason`` picks the error type (``FieldValueForbidden`` -> ``Forbidden: ...``,
``FieldValueRequired`` -> ``Required value: ...``, ``FieldValueDuplicate`` ->
``Duplicate value: "..."``, otherwise ``Invalid value``).
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import celpy
from celpy import celtypes, evaluation

#: the macros and functions every CEL program may call (celpy's built-ins and macros)
_MACROS = frozenset({"has", "all", "exists", "exists_one", "map", "filter", "dyn"})
REASONS = ("FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired", "FieldValueDuplicate")
_FIELD_PATH = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(?:'([^']*)'|(\d+))\]")


class Rule:
    """One compiled rule of a schema node."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.spec = spec
        self.text = str(spec.get("rule") or "")
        self.program = _program(self.text)
        self.transition = "oldSelf" in _idents(self.text)
        msg_expr = spec.get("messageExpression")
        self.message_program = _program(str(msg_expr)) if msg_expr else None

    def default_message(self) -> str:
        """kube's text: the trimmed ``message``, else ``failed rule: <rule>``."""
        message = str(self.spec.get("message") or "").strip()
        return message or f"failed rule: {self.text.strip()}"

    def error_string(self) -> str:
        """What kube names the rule by in an evaluation error: its message, else its text."""
        return str(self.spec.get("message") or "").strip() or self.text.strip()

    def message(self, activation: dict[str, Any]) -> str:
        """``messageExpression``'s string (a usable one: non-empty, one line), else
        :meth:`default_message`, as kube-apiserver falls back."""
        if self.message_program is not None:
            try:
                got = self.message_program.evaluate(activation)
            except celpy.CELEvalError:
                got = None
            if isinstance(got, str) and got.strip() and "\n" not in got:
                return got.strip()
        return self.default_message()


@functools.lru_cache(maxsize=4096)
def _parse(text: str) -> Any:
    """celpy's parse tree of ``text`` (a lark tree); raises celpy.CELParseError."""
    return celpy.Environment().compile(text)


def _program(text: str) -> celpy.Runner:
    env = celpy.Environment()
    return env.program(_parse(text), functions=dict(K8S_FUNCTIONS))


# ------------------------------------------------------------ the Kubernetes network library

_BITS = re.compile(r"[0-9]+")


def _go_addr(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``text`` as kube's CEL library parses an address (Go's ``netip.ParseAddr``:
    dotted quad without leading zeros, or IPv6), None when refused: unparsable, with a
    zone (``%eth0``), or an IPv4-mapped IPv6 address (``::ffff:1.2.3.4``)."""
    if "%" in text:
        return None
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return None
    return addr


def go_cidr_ok(text: str) -> bool:
    """``isCIDR``'s answer: Go's ``netip.ParsePrefix`` (an address, the last ``/``,
    then decimal bits without sign or leading zero, at most 32 or 128; host bits may be
    set) and kube's refusal of zones and IPv4-mapped addresses."""
    addr_text, slash, bits = text.rpartition("/")
    if not slash:
        return False
    addr = _go_addr(addr_text)
    if addr is None or not _BITS.fullmatch(bits) or (len(bits) > 1 and bits[0] == "0"):
        return False
    return int(bits) <= addr.max_prefixlen


def _is_cidr(value: Any) -> Any:
    if not isinstance(value, celtypes.StringType):
        return celpy.CELEvalError("no such overload", TypeError, None)
    return celtypes.BoolType(go_cidr_ok(str(value)))


#: the Kubernetes CEL library functions svclab evaluates beyond celpy's own
K8S_FUNCTIONS: Mapping[str, Callable[[Any], Any]] = {"isCIDR": _is_cidr}


@functools.lru_cache(maxsize=4096)
def _idents(text: str) -> frozenset[str]:
    """Every identifier and every function name ``text`` uses."""
    out: set[str] = set()
    for tree in _parse(text).iter_subtrees():
        if tree.data in ("ident", "ident_arg", "member_dot", "member_dot_arg"):
            for child in tree.children:
                if getattr(child, "type", None) == "IDENT":
                    out.add(str(child))
    return frozenset(out)


@functools.lru_cache(maxsize=4096)
def _calls(text: str) -> frozenset[str]:
    """The functions and macros ``text`` calls (``f(...)`` and ``x.f(...)``)."""
    out: set[str] = set()
    for tree in _parse(text).iter_subtrees():
        if tree.data in ("ident_arg", "member_dot_arg"):
            for child in tree.children:
                if getattr(child, "type", None) == "IDENT":
                    out.add(str(child))
    return frozenset(out)


@functools.lru_cache(maxsize=4096)
def _undeclared(text: str) -> tuple[str, ...]:
    """The names ``text`` reads that are neither ``self`` / ``oldSelf``, a variable a
    macro binds (``self.all(x, ...)``), nor a type name: kube's compiler refuses them
    (``undeclared reference``)."""
    bound: set[str] = set()
    for tree in _parse(text).iter_subtrees():
        if tree.data != "member_dot_arg":
            continue
        name = next((str(c) for c in tree.children if getattr(c, "type", None) == "IDENT"), "")
        args = [c for c in tree.children if getattr(c, "data", None) == "exprlist"]
        if name in _MACROS and args and args[0].children:
            bound |= {
                str(t)
                for sub in args[0].children[0].iter_subtrees()
                if sub.data == "ident"
                for t in sub.children
            }
    allowed = {"self", "oldSelf"} | bound | set(evaluation.base_functions)
    free = {
        str(t)
        for sub in _parse(text).iter_subtrees()
        if sub.data == "ident"
        for t in sub.children
        if getattr(t, "type", None) == "IDENT"
    }
    return tuple(sorted(free - allowed))


def _known_functions() -> frozenset[str]:
    return frozenset(evaluation.base_functions) | _MACROS | frozenset(K8S_FUNCTIONS)


def _go_value(spec: Mapping[str, Any]) -> str:
    """A rule as kube prints the Go struct in a field error (``%#v``)."""

    def q(v: Any) -> str:
        return '"' + str(v or "").replace("\\", "\\\\").replace('"', '\\"') + '"'

    reason = spec.get("reason")
    reason_text = (
        f"(*apiextensions.FieldValueErrorReason)({q(reason)})"
        if reason
        else "(*apiextensions.FieldValueErrorReason)(nil)"
    )
    old = spec.get("optionalOldSelf")
    old_text = "(*bool)(nil)" if old is None else f"(*bool)({str(bool(old)).lower()})"
    return (
        f"apiextensions.ValidationRule{{Rule:{q(spec.get('rule'))}, Message:{q(spec.get('message'))}, "
        f"MessageExpression:{q(spec.get('messageExpression'))}, Reason:{reason_text}, "
        f"FieldPath:{q(spec.get('fieldPath'))}, OptionalOldSelf:{old_text}}}"
    )


def _compile_error(e: celpy.CELParseError, text: str) -> str:
    """A syntax error on one line, as cel-go starts it: ``ERROR: <input>:L:C: Syntax error``."""
    if e.line is None or e.column is None:
        return "ERROR: <input>: Syntax error: " + " ".join(str(e.args[0] if e.args else e).split())
    lines = text.splitlines() or [""]
    source = lines[e.line - 1] if 0 < e.line <= len(lines) else ""
    at = source[e.column - 1 :].strip()
    near = f"unexpected input {at[:20]!r}" if at else "unexpected end of input"
    return f"ERROR: <input>:{e.line}:{e.column}: Syntax error: {near}"


def rule_problems(schema: Any, path: str) -> list[tuple[str, str]]:
    """Why the ``x-kubernetes-validations`` of ``schema`` (at ``path``) and of every
    node under it cannot be evaluated, as ``(field path, message)``: a rule that does
    not compile, a function celpy lacks, an unknown ``reason``, a ``fieldPath`` that
    is not a path, ``optionalOldSelf``."""
    out: list[tuple[str, str]] = []
    for node, at in _nodes(schema, path):
        rules = node.get("x-kubernetes-validations")
        if rules is None:
            continue
        if not isinstance(rules, list):
            out.append((f"{at}.x-kubernetes-validations", "Invalid value: must be a list"))
            continue
        for i, spec in enumerate(rules):
            f = f"{at}.x-kubernetes-validations[{i}]"
            if not isinstance(spec, Mapping):
                out.append((f, "Invalid value: must be an object"))
                continue
            out.extend(_one_rule_problems(spec, f))
    return out


def _one_rule_problems(spec: Mapping[str, Any], f: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    known = _known_functions()
    for key, what in (("rule", ""), ("messageExpression", "messageExpression ")):
        text = spec.get(key)
        if key == "rule" and not (isinstance(text, str) and text.strip()):
            out.append((f"{f}.rule", "Required value: rule is not specified"))
            continue
        if text is None:
            continue
        shown = _go_value(spec) if key == "rule" else _quote(str(text))
        try:
            _parse(str(text))
        except celpy.CELParseError as e:
            out.append(
                (
                    f"{f}.{key}",
                    f"Invalid value: {shown}: {what}compilation failed: {_compile_error(e, str(text))}",
                )
            )
            continue
        unknown = _undeclared(str(text))
        if unknown:
            out.append(
                (
                    f"{f}.{key}",
                    f"Invalid value: {shown}: {what}compilation failed: ERROR: <input>: "
                    f"undeclared reference to '{unknown[0]}'",
                )
            )
            continue
        missing = sorted(_calls(str(text)) - known)
        if missing:
            out.append(
                (
                    f"{f}.{key}",
                    f"Invalid value: {shown}: svclab cannot evaluate it: cel-python has no "
                    f"function {', '.join(missing)} (a Kubernetes CEL library function)",
                )
            )
    reason = spec.get("reason")
    if reason is not None and reason not in REASONS:
        allowed = ", ".join(f'"{r}"' for r in REASONS)
        out.append(
            (
                f"{f}.reason",
                f"Unsupported value: {_quote(str(reason))}: supported values: {allowed}",
            )
        )
    fp = spec.get("fieldPath")
    if fp and _field_path(str(fp)) is None:
        out.append((f"{f}.fieldPath", f"Invalid value: {_quote(str(fp))}: must be a valid path"))
    if spec.get("optionalOldSelf") is not None:
        out.append(
            (
                f"{f}.optionalOldSelf",
                "Forbidden: svclab cannot evaluate it: cel-python has no CEL optionals",
            )
        )
    return out


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _field_path(fp: str) -> str | None:
    """``.a.b['c'][0]`` as a field path suffix (``.a.b[c][0]``), None if malformed."""
    pos, out = 0, ""
    while pos < len(fp):
        m = _FIELD_PATH.match(fp, pos)
        if m is None:
            return None
        name, key, index = m.groups()
        out += f".{name}" if name is not None else f"[{key if key is not None else index}]"
        pos = m.end()
    return out or None


def _nodes(schema: Any, path: str) -> Iterator[tuple[Mapping[str, Any], str]]:
    """Every schema node under ``schema`` with its path, as kube names them."""
    if not isinstance(schema, Mapping):
        return
    yield schema, path
    props = schema.get("properties")
    if isinstance(props, Mapping):
        for key, sub in props.items():
            yield from _nodes(sub, f"{path}.properties[{key}]")
    yield from _nodes(schema.get("items"), f"{path}.items")
    yield from _nodes(schema.get("additionalProperties"), f"{path}.additionalProperties")


# --------------------------------------------------------------------------- evaluation


def has_rules(schema: Any) -> bool:
    """Whether any node of ``schema`` carries ``x-kubernetes-validations``."""
    return any(node.get("x-kubernetes-validations") for node, _ in _nodes(schema, ""))


def _root_view(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object as a root rule sees it: metadata only name and generateName."""
    out = dict(obj)
    meta = out.get("metadata")
    if isinstance(meta, Mapping):
        out["metadata"] = {k: meta[k] for k in ("name", "generateName") if k in meta}
    return out


def _cel(value: Any) -> Any:
    return celpy.json_to_cel(_drop_nulls(value))


def _drop_nulls(value: Any) -> Any:
    """Null-valued fields read as absent in CEL, as kube documents."""
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def evaluate(
    obj: Mapping[str, Any], schema: Mapping[str, Any], old: Mapping[str, Any] | None = None
) -> list[tuple[str, str]]:
    """Every rule of ``schema`` that ``obj`` (pruned and defaulted, valid against the
    schema's types) fails, as ``(field path, message)``; ``old`` the stored object on
    an update (None on a create: transition rules are skipped)."""
    out: list[tuple[str, str]] = []
    _eval(
        _root_view(obj),
        schema,
        None if old is None else _root_view(old),
        "",
        out,
        has_old=old is not None,
    )
    return out


def _eval(
    value: Any,
    schema: Mapping[str, Any],
    old: Any,
    path: str,
    out: list[tuple[str, str]],
    *,
    has_old: bool,
) -> None:
    if value is None or not isinstance(schema, Mapping):
        return
    rules = schema.get("x-kubernetes-validations")
    if isinstance(rules, list) and rules:
        _check(value, schema, old, path, rules, out, has_old=has_old)
    props = schema.get("properties")
    additional = schema.get("additionalProperties")
    if isinstance(value, dict):
        olds = old if isinstance(old, dict) else {}
        for key, item in value.items():
            sub = props.get(key) if isinstance(props, Mapping) else None
            if not isinstance(sub, Mapping):
                sub = additional if isinstance(additional, Mapping) else None
            if sub is not None:
                child = f"{path}.{key}" if path else key
                _eval(item, sub, olds.get(key), child, out, has_old=has_old and key in olds)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                prev = _correlated(item, old, schema)
                _eval(item, items, prev, f"{path}[{i}]", out, has_old=prev is not None)


def _correlated(item: Any, old: Any, schema: Mapping[str, Any]) -> Any:
    """The old element an element of a ``x-kubernetes-list-type: map`` list stands
    for (same keys); other lists' elements have none, as kube correlates them."""
    if schema.get("x-kubernetes-list-type") != "map" or not isinstance(old, list):
        return None
    keys = schema.get("x-kubernetes-list-map-keys") or ()
    if not isinstance(item, dict):
        return None
    for prev in old:
        if isinstance(prev, dict) and all(prev.get(k) == item.get(k) for k in keys):
            return prev
    return None


def _check(
    value: Any,
    schema: Mapping[str, Any],
    old: Any,
    path: str,
    rules: list[Any],
    out: list[tuple[str, str]],
    *,
    has_old: bool,
) -> None:
    typ = str(schema.get("type") or "")
    activation: dict[str, Any] = {"self": _cel(value)}
    if has_old and old is not None:
        activation["oldSelf"] = _cel(old)
    for spec in rules:
        if not isinstance(spec, Mapping):
            continue
        rule = _compiled(spec)
        if rule.transition and "oldSelf" not in activation:
            continue  # kube skips a transition rule where there is nothing old
        where = path
        fp = spec.get("fieldPath")
        if fp:
            suffix = _field_path(str(fp)) or ""
            where = (path + suffix) if path else suffix.lstrip(".")
        try:
            got = rule.program.evaluate(activation)
        except celpy.CELEvalError as e:
            out.append(
                (
                    path,
                    f"Invalid value: {_quote(typ)}: {_eval_error(e)} evaluating rule: {rule.error_string()}",
                )
            )
            continue
        if isinstance(got, celpy.CELEvalError):
            out.append(
                (
                    path,
                    f"Invalid value: {_quote(typ)}: {_eval_error(got)} evaluating rule: {rule.error_string()}",
                )
            )
            continue
        if not isinstance(got, celtypes.BoolType):
            out.append(
                (
                    path,
                    f"Invalid value: {_quote(typ)}: rule did not evaluate to a bool: {rule.text.strip()}",
                )
            )
            continue
        if got:
            continue
        message = rule.message(activation)
        reason = spec.get("reason") or "FieldValueInvalid"
        if reason == "FieldValueForbidden":
            out.append((where, f"Forbidden: {message}"))
        elif reason == "FieldValueRequired":
            out.append((where, f"Required value: {message}"))
        elif reason == "FieldValueDuplicate":
            out.append((where, f"Duplicate value: {_quote(message)}"))
        else:
            out.append((where, f"Invalid value: {_quote(typ)}: {message}"))


def _eval_error(e: Exception) -> str:
    """celpy's reason for a failed evaluation, without its dump of the activation."""
    args = getattr(e, "args", ())
    text = str(args[0]) if args else str(e)
    return text.split(" (in activation")[0]


@functools.lru_cache(maxsize=4096)
def _compiled_cached(key: tuple[tuple[str, str], ...]) -> Rule:
    return Rule(dict(key))


def _compiled(spec: Mapping[str, Any]) -> Rule:
    key = tuple(
        sorted(
            (str(k), str(v)) for k, v in spec.items() if v is not None and k != "optionalOldSelf"
        )
    )
    return _compiled_cached(key)
