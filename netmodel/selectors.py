"""Label selectors (matchLabels + matchExpressions), and the ``a=b,c!=d,e in (x,y)`` text form."""

from __future__ import annotations

import re
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True, populate_by_name=True, alias_generator=to_camel, extra="allow"
    )


class LabelSelectorRequirement(_Model):
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist
    values: list[str] = Field(default_factory=list)

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op == "In":
            return self.key in labels and labels[self.key] in self.values
        if op == "NotIn":
            return self.key not in labels or labels[self.key] not in self.values
        if op == "Exists":
            return self.key in labels
        if op == "DoesNotExist":
            return self.key not in labels
        if op in ("Gt", "Lt"):  # node selector operators
            if self.key not in labels or not self.values:
                return False
            try:
                have, want = int(labels[self.key]), int(self.values[0])
            except ValueError:
                return False
            return have > want if op == "Gt" else have < want
        raise ValueError(f"unknown selector operator {op!r}")


class LabelSelector(_Model):
    """A Kubernetes LabelSelector. An empty selector matches everything."""

    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list)

    def matches(self, labels: Mapping[str, str]) -> bool:
        for k, v in self.match_labels.items():
            if labels.get(k) != v:
                return False
        return all(req.matches(labels) for req in self.match_expressions)

    @property
    def is_empty(self) -> bool:
        return not self.match_labels and not self.match_expressions


def matches_map(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """A Service-style map selector: every key=value present."""
    return all(labels.get(k) == v for k, v in selector.items())


_SET_RE = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def parse_selector(text: str) -> LabelSelector:
    """Parse kubectl's ``-l`` syntax: ``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``,
    ``a in (x,y)``, ``a notin (x)``, comma separated. Raises ValueError."""
    labels: dict[str, str] = {}
    exprs: list[LabelSelectorRequirement] = []
    for part in _split_top(text):
        part = part.strip()
        if not part:
            continue
        m = _SET_RE.match(part)
        if m:
            values = [v.strip() for v in m.group(3).split(",") if v.strip()]
            op = "In" if m.group(2) == "in" else "NotIn"
            exprs.append(LabelSelectorRequirement(key=m.group(1), operator=op, values=values))
        elif "!=" in part:
            k, v = part.split("!=", 1)
            exprs.append(
                LabelSelectorRequirement(key=k.strip(), operator="NotIn", values=[v.strip()])
            )
        elif "=" in part:
            k, v = part.split("==", 1) if "==" in part else part.split("=", 1)
            labels[k.strip()] = v.strip()
        elif part.startswith("!"):
            exprs.append(LabelSelectorRequirement(key=part[1:].strip(), operator="DoesNotExist"))
        elif re.fullmatch(r"[A-Za-z0-9./_-]+", part):
            exprs.append(LabelSelectorRequirement(key=part, operator="Exists"))
        else:
            raise ValueError(f"cannot parse label selector {text!r} at {part!r}")
    return LabelSelector(match_labels=labels, match_expressions=exprs)


def _split_top(text: str) -> list[str]:
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return out
