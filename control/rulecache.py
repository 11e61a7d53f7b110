"""Each node's rules, and their compiled form, cached by content (and other values a
question derives from the store, by the store's state).

Three levels, each keyed by what determines the value, so that an entry is reused
exactly while that is unchanged:

* **rendered** — a node's :data:`~netmodel.rulesets.RulesetInput` (and, in IPVS
  mode, the Service addresses it binds), keyed by a hash of what a kube-proxy renders
  them from: the Cluster, the KubeProxyConfiguration, the node's Node object and every
  Service and EndpointSlice, each named by (kind, key, uid, resourceVersion) — an object
  re-created or changed has another. Saves the change tracker, the render and the
  payload's parse.
* **compiled** — the parsed and compiled form of one RulesetInput
  (the emulator's ``CompiledRules``, opaque here: the control plane does not import the
  emulator), keyed by a hash of its text.
  Saves the parse and the compile; nodes with equal rules share one entry. Compiled
  iptables rules pickle chain by chain and come back lazy: a question unpickles only
  the chains its packets run (:class:`dataplane.netfilter.compiled.CompiledRuleset`).
* **derived** — a value computed from the store's objects alone (where every Pod is,
  say: :meth:`RuleCache.derived`), keyed by the store's state token (its file's identity
  and committed revision: :func:`control.store.base.state_token`) and the value's name.
  Saves reading every row of a kind; the NetworkPolicy agent's rendering of each node
  (:mod:`app.netpolview`) is kept there too, so a question on an unchanged cluster
  reads no policy and renders none.

Where: in memory, for the life of the process (``svclab serve`` answers many questions in
one; bounded), and, for a persistent cluster, under ``DIR/cache/`` (one file per entry,
written atomically, the oldest pruned beyond :data:`MAX_FILES` per level).

Entries are pickles tagged with a fingerprint of the code that made them (Python's
version, :data:`FORMAT`, and the size and mtime of every source file of the renderers,
kube-proxy's and the NetworkPolicy agent's, the netfilter model and the emulator's
filters): a change to any of them makes every
older entry a miss. An entry that cannot be read is a miss. The state directory is the
user's own, as its ``state.db`` is: do not point ``--state`` at a directory you do not
trust.
"""

from __future__ import annotations

import gc
import hashlib
import os
import pickle
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from netmodel.objects import KubeObject

if TYPE_CHECKING:
    from control.store.base import Store
    from netmodel.rulesets import RulesetInput

FORMAT = 1
T = TypeVar("T")
CACHE_DIR = "cache"
MAX_FILES = 512
MAX_MEMORY = 64

#: source trees whose code decides what an entry holds (relative to the checkout)
_CODE = ("dataplane/netfilter", "dataplane/proxy", "dataplane/emulator/filters.py",
         "control/agents/kubeproxy.py", "control/proxyenv.py", "control/emulation.py",
         # the NetworkPolicy agent's renderings (app.netpolview keeps them as derived)
         "dataplane/netpol", "netmodel/netpolicy.py", "netmodel/selectors.py",
         "control/agents/netpolicy.py", "app/netpolview.py", "netmodel/clusterpolicy.py")
_ROOT = Path(__file__).resolve().parents[1]
_fingerprint: str | None = None

_MEMORY: dict[str, OrderedDict[str, Any]] = {
    "rendered": OrderedDict(), "compiled": OrderedDict(), "derived": OrderedDict()
}


def fingerprint() -> str:
    """A hash of the code that makes the cached values (see the module docstring)."""
    global _fingerprint
    if _fingerprint is None:
        h = hashlib.sha256(f"{FORMAT}|{sys.version}".encode())
        for rel in _CODE:
            p = _ROOT / rel
            files = sorted(p.rglob("*.py")) if p.is_dir() else [p]
            for f in files:
                try:
                    st = f.stat()
                except OSError:
                    continue
                h.update(f"{f.relative_to(_ROOT)}|{st.st_size}|{st.st_mtime_ns}\n".encode())
        _fingerprint = h.hexdigest()[:16]
    return _fingerprint


def inputs_key(parts: Iterable[str], objects: Iterable[KubeObject]) -> str:
    """The rendered-level key: ``parts`` (the Cluster, the KubeProxyConfiguration, the
    node) and every object's (kind, key, uid, resourceVersion)."""
    return identities_key(
        parts,
        ((o.kind, o.key, str(o.metadata.uid), str(o.metadata.resource_version))
         for o in objects),
    )


def identities_key(parts: Iterable[str], identities: Iterable[tuple[str, ...]]) -> str:
    """:func:`inputs_key` from each object's (kind, key, uid, resourceVersion) as text
    (None as ``"None"``), without the objects."""
    h = hashlib.sha256(fingerprint().encode())
    for p in parts:
        h.update(p.encode() + b"\0")
    for i in identities:
        h.update(("|".join(i) + "\n").encode())
    return h.hexdigest()


def content_key(rules: RulesetInput) -> str:
    """The compiled-level key: a hash of the ruleset's kind and every field, each text
    field as its UTF-8 bytes prefixed by their length (any other value by its repr): two
    rulesets get one key exactly when they are equal. Hashing the text as it is, not its
    repr, costs a fifth as much on a 6 MB iptables-save text (a warm question keys two)."""
    h = hashlib.sha256(fingerprint().encode())
    h.update(type(rules).__name__.encode() + b"\0")
    for name in type(rules).__slots__:  # frozen slotted dataclasses
        value = getattr(rules, name)
        if isinstance(value, str):
            data = value.encode("utf-8", "surrogatepass")
            h.update(b"%s=s%d:" % (name.encode(), len(data)))
            h.update(data)
        else:
            h.update(name.encode() + b"=r" + repr(value).encode() + b"\0")
    return h.hexdigest()


class RuleCache:
    """The two levels over one directory (None: memory only)."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self.hits = {"rendered": 0, "compiled": 0, "derived": 0}
        self.misses = {"rendered": 0, "compiled": 0, "derived": 0}

    @classmethod
    def for_state(cls, state_dir: Path | None) -> RuleCache:
        return cls(state_dir / CACHE_DIR if state_dir is not None else None)

    def get(self, level: str, key: str) -> Any | None:
        mem = _MEMORY[level]
        if key in mem:
            mem.move_to_end(key)
            self.hits[level] += 1
            return mem[key]
        value = self._read(level, key)
        if value is None:
            self.misses[level] += 1
            return None
        self.hits[level] += 1
        self._remember(level, key, value)
        return value

    def put(self, level: str, key: str, value: Any) -> None:
        self._remember(level, key, value)
        self._write(level, key, value)

    def derived(self, store: Store, name: str, compute: Callable[[], T]) -> T:
        """``compute()``, a value derived from ``store``'s objects alone (``name`` says
        which, and the version of the code that derives it), kept by the store's
        :func:`~control.store.base.state_token` (level ``derived``): on a persistent
        cluster that has not changed, a question reads, say, where 20,000 Pods are
        from one small file instead of reading every Pod's row. A store without a
        token (another backend, an open transaction) derives it every time."""
        from control.store.base import state_token

        token = state_token(store)
        if token is None:
            return compute()
        key = hashlib.sha256(repr((FORMAT, fingerprint(), token, name)).encode()).hexdigest()
        value = self.get("derived", key)
        if value is None:
            value = compute()
            self.put("derived", key, value)
        return value

    def compiled(self) -> CompiledCache:
        """The compiled level as the mapping :meth:`EngineFilter.build` takes."""
        return CompiledCache(self)

    # ---- storage

    def _remember(self, level: str, key: str, value: Any) -> None:
        mem = _MEMORY[level]
        mem[key] = value
        mem.move_to_end(key)
        while len(mem) > MAX_MEMORY:
            mem.popitem(last=False)

    def _path(self, level: str, key: str) -> Path | None:
        if self.directory is None:
            return None
        return self.directory / level / f"{key}.pickle"

    def _read(self, level: str, key: str) -> Any | None:
        path = self._path(level, key)
        if path is None:
            return None
        # a compiled rule set is hundreds of thousands of acyclic objects: the cyclic
        # collections their allocation triggers took twice as long as the load itself
        paused = gc.isenabled()
        gc.disable()
        try:
            with path.open("rb") as f:
                return pickle.load(f)  # the user's own state directory (module docstring)
        except Exception:  # unreadable, truncated, made by other code: a miss
            return None
        finally:
            if paused:
                gc.enable()

    def _write(self, level: str, key: str, value: Any) -> None:
        path = self._path(level, key)
        if path is None or not path.parents[2].is_dir():  # the state directory is gone
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            try:
                with tmp.open("wb") as f:
                    pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:
                tmp.unlink(missing_ok=True)
                return  # kept in memory only
            tmp.replace(path)
            _prune(path.parent)
        except OSError:
            return  # a cache that cannot be written is only slower


def _prune(directory: Path) -> None:
    entries = [p for p in directory.iterdir() if p.suffix == ".pickle"]
    if len(entries) <= MAX_FILES:
        return
    entries.sort(key=lambda p: p.stat().st_mtime_ns)
    for p in entries[: len(entries) - MAX_FILES]:
        p.unlink(missing_ok=True)


class CompiledCache(MutableMapping["RulesetInput", Any]):
    """RulesetInput -> CompiledRules through a :class:`RuleCache` (by content)."""

    def __init__(self, cache: RuleCache) -> None:
        self.cache = cache

    def __getitem__(self, rules: RulesetInput) -> Any:
        value = self.cache.get("compiled", content_key(rules))
        if value is None:
            raise KeyError(rules)
        return value

    def __setitem__(self, rules: RulesetInput, value: Any) -> None:
        self.cache.put("compiled", content_key(rules), value)

    def __delitem__(self, rules: RulesetInput) -> None:
        raise TypeError("entries are not deleted one by one")

    def __iter__(self) -> Iterator[RulesetInput]:
        return iter(())

    def __len__(self) -> int:
        return 0
