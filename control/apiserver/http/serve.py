"""``svclab serve``: the HTTP API over HTTPS with uvicorn.

TLS (:mod:`.tls`): the serving certificate of :mod:`.pki`; a client certificate is
requested and any is accepted by the handshake, as kube-apiserver does; the
authenticator (:mod:`.authn`) verifies it against the cluster CA and answers 401 to a
certificate from another CA, an expired one or one not meant for client
authentication. uvicorn serves HTTP on top of that TLS layer, on a plain TCP listener.

Background work on the event loop: the control-plane driver (:mod:`.driver`), a
flusher that commits the SQLite store every ``flush_every`` seconds and checkpoints its
WAL every ``checkpoint_every`` seconds in a worker thread (a checkpoint's copying and
fsyncs would otherwise stall the loop inside a commit), and a compactor
that keeps the last ``watch_history`` revisions of the watch log (older watches get
410 Gone). SIGINT/SIGTERM stop uvicorn; the store is then committed and closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import uvicorn
from cryptography import x509

from control.apiserver.http import pki, tls
from control.apiserver.http.app import API
from control.apiserver.http.authn import Authenticator, load_token_file
from control.apiserver.http.driver import Driver, RunnerDriver
from control.apiserver.podruntime import PodRuntime
from control.store.sqlite import SqliteStore

log = logging.getLogger("svclab.serve")


def _http_protocol_class() -> type:
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as Base
    except ImportError:  # pragma: no cover - httptools missing
        from uvicorn.protocols.http.h11_impl import H11Protocol as Base  # type: ignore[assignment]
    return Base


class _RefusedHandshakes(logging.Filter):
    """uvicorn logs an error when a WebSocket app answers the handshake with an HTTP
    response (the ``websocket.http.response`` extension) instead of accepting it: its
    protocol does not count that answer as a completed handshake. A refused exec is
    not an error of the server."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "ASGI callable returned without completing handshake."


class _Uvicorn(uvicorn.Server):
    """uvicorn's server; on SIGINT/SIGTERM it ends the open watches at once (so the
    graceful shutdown does not wait for them) and exits normally afterwards instead of
    re-raising the signal (the store is closed after :meth:`serve` returns)."""

    def __init__(self, config: uvicorn.Config, api: API) -> None:
        super().__init__(config)
        self.api = api

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        self.should_exit = True
        with contextlib.suppress(RuntimeError):
            asyncio.get_running_loop().call_soon_threadsafe(self.api.hub.close_all)


class Server:
    def __init__(
        self,
        state_dir: Path,
        host: str,
        port: int,
        *,
        token_file: Path | None = None,
        flush_every: float = 0.2,
        checkpoint_every: float = 1.0,
        watch_history: int = 100_000,
        compact_every: float = 30.0,
        kube_proxies: bool = True,
        driver_factory: Callable[[API], Driver] | None = None,
        runtime_factory: Callable[[API], PodRuntime] | None = None,
    ) -> None:
        """``driver_factory``: builds the control-plane driver for the API (default:
        :class:`RunnerDriver`, the deterministic runner on the event loop);
        ``runtime_factory``: the pods' runtime for exec, attach, port-forward, logs and
        proxy (:mod:`control.apiserver.podruntime`; None: those answer 503)."""
        self.driver_factory = driver_factory
        self.state_dir = state_dir
        self.host = host
        self.port = port
        self.paths = pki.ensure_pki(state_dir, host, port)
        tokens = load_token_file(token_file) if token_file else {}
        client_cas = x509.load_pem_x509_certificates(self.paths.ca_crt.read_bytes())
        self.api = API(
            state_dir,
            Authenticator(tokens, client_cas),
            server_address=f"{host}:{port}",
            kube_proxies=kube_proxies,
        )
        if runtime_factory is not None:
            self.api.runtime = runtime_factory(self.api)
        self.flush_every = flush_every
        self.checkpoint_every = checkpoint_every
        self.watch_history = watch_history
        self.compact_every = compact_every
        self._tasks: list[asyncio.Task[None]] = []

    async def _flusher(self) -> None:
        loop = asyncio.get_running_loop()
        last_checkpoint = loop.time()
        while True:
            await asyncio.sleep(self.flush_every)
            store = self.api.store
            flush = getattr(store, "flush", None)
            if flush is not None:
                flush()
            if isinstance(store, SqliteStore):
                store.use_server_cache()
                store.defer_checkpoints()
                if loop.time() - last_checkpoint >= self.checkpoint_every:
                    try:
                        await loop.run_in_executor(None, store.checkpoint)
                    except sqlite3.Error as e:  # tried again next time
                        log.warning("WAL checkpoint failed: %s", e)
                    last_checkpoint = loop.time()

    async def _compactor(self) -> None:
        while True:
            await asyncio.sleep(self.compact_every)
            await self.compact()

    #: revisions compacted per step; the loop serves requests between steps
    COMPACT_STEP = 5000

    async def compact(self) -> None:
        store = self.api.store
        target = min(self.api.hub.revision, store.revision - self.watch_history)
        if target <= store.compacted_revision:
            return
        while store.compacted_revision < target:
            store.compact(min(target, store.compacted_revision + self.COMPACT_STEP))
            await asyncio.sleep(0)
        log.info("compacted the watch log up to revision %d", target)

    async def run(self) -> None:
        config = uvicorn.Config(
            self.api,
            host=self.host,
            port=self.port,
            http=tls.uvicorn_protocol(
                tls.server_context(self.paths.server_crt, self.paths.server_key, self.paths.ca_crt),
                _http_protocol_class(),
            ),
            # WebSocket upgrades (exec, attach, port-forward: control/apiserver/http/wsstreams.py)
            ws="websockets-sansio",
            lifespan="off",
            log_level="warning",
            access_log=False,
            proxy_headers=False,  # no proxy in front: X-Forwarded-* are not trusted
            timeout_graceful_shutdown=2,
            timeout_keep_alive=120,
        )
        server = _Uvicorn(config, self.api)
        logging.getLogger("uvicorn.error").addFilter(_RefusedHandshakes())
        driver = (self.driver_factory or RunnerDriver)(self.api)
        self.api.driver = driver
        self.api.start()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._flusher()), loop.create_task(self._compactor())]
        log.info(
            "serving the Kubernetes API on https://%s:%d (state %s)",
            self.host,
            self.port,
            self.state_dir,
        )
        try:
            await server.serve()
        finally:
            self.api.hub.close_all()
            await driver.stop()
            for t in self._tasks:
                t.cancel()
            self.api.session.close()
            log.info("stopped; state saved in %s", self.state_dir)


def serve(
    state_dir: Path,
    host: str,
    port: int,
    *,
    token_file: Path | None = None,
    watch_history: int = 100_000,
    compact_every: float = 30.0,
    kube_proxies: bool = True,
    control_plane: str = "live",
    runtime_factory: Callable[[API], PodRuntime] | None = None,
    live_entry: Sequence[str] = ("-m", "control.live"),
) -> None:
    """``control_plane``: ``live`` (the components are API clients of this server, with
    their own identities: :mod:`control.live`) or ``runner`` (the deterministic runner
    on the event loop: :class:`RunnerDriver`). ``live_entry``: how the live control
    plane's process is started (:attr:`control.live.LiveDriver.entry`)."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from control.live import LiveDriver
    from control.serving import serving

    url = pki.server_url(host, port)
    factory: Callable[[API], Driver] | None = None
    if control_plane == "live":
        factory = lambda api: LiveDriver(api, url, entry=live_entry)  # noqa: E731
    with serving(state_dir):  # CLI commands on DIR now leave the converging to us
        srv = Server(
            state_dir,
            host,
            port,
            token_file=token_file,
            watch_history=watch_history,
            compact_every=compact_every,
            kube_proxies=kube_proxies,
            driver_factory=factory,
            runtime_factory=runtime_factory,
        )
        profile = os.environ.get("SVCLAB_PROFILE")
        if not profile:
            asyncio.run(srv.run())
            return
        import cProfile  # where the time goes, for scripts/bench_api.py --profile

        prof = cProfile.Profile()
        prof.enable()
        try:
            asyncio.run(srv.run())
        finally:
            prof.disable()
            prof.dump_stats(profile)
