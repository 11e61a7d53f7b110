"""Informers, work queues and list-watch: how components read the cluster.

The pieces (client-go's shape, in Python):

* :class:`ListerWatcher` — list a kind, then watch it from the list's revision; over the
  in-process store (:class:`StoreListerWatcher`) or the HTTPS API
  (:mod:`control.informers.http`);
* :class:`Reflector` and :class:`SharedInformer` — keep an indexed
  :class:`ObjectCache` current, relisting on 410 Gone, and tell handlers what changed;
* :class:`WorkQueue` — the rate-limited queue of keys ``reconcile(key)`` takes from.

The deterministic runner (:mod:`control.runner`) and the live driver
(:mod:`control.live`) drive the same components through these.
"""

from control.informers.cache import Indexer, ObjectCache
from control.informers.informer import Reflector, SharedInformer
from control.informers.listwatch import (
    Bookmark,
    ListerWatcher,
    Listing,
    StoreListerWatcher,
    field_matcher,
)
from control.informers.workqueue import ExponentialBackoff, NoDelay, RateLimiter, WorkQueue

__all__ = [
    "Bookmark",
    "ExponentialBackoff",
    "Indexer",
    "ListerWatcher",
    "Listing",
    "NoDelay",
    "ObjectCache",
    "RateLimiter",
    "Reflector",
    "SharedInformer",
    "StoreListerWatcher",
    "WorkQueue",
    "field_matcher",
]
