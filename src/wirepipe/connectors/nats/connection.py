"""The connection config and the managed connection every NATS connector shares.

One place decides how wirepipe talks to NATS, so the core and JetStream connectors
behave alike:

- ``url: embedded`` (or no url) starts the process's shared embedded nats-server for
  the connector's lifetime (``wirepipe.connectors.nats.server``).
- Auth: user/password, token, a ``.creds`` file, an nkey seed (inline or a file); TLS
  with a CA, a client certificate and key. Secrets are ``SecretStr`` and never reach a
  log line or an error message (a URL is always shown without its user info).
- Reconnects forever (by default) with exponential backoff and jitter; each disconnect
  and reconnect is logged once and counted.
- The first connect has its own timeout (nats-py's can block for minutes otherwise) and
  fails fast, with a message a user can act on, on an authorization or TLS error. While it
  retries a server that does not answer, ``waiting`` says so (the status line shows it) and
  one log line says it at once, with how long it will wait: ``wirepipe run`` and
  ``wirepipe bench`` connect through here, so they wait alike.
- Slow-consumer drops (nats-py calls ``error_cb`` once per dropped message) are counted
  and logged as a periodic summary, never one line per message. A connector that reads what
  its client dropped again (``drops_read_again``: the ordered JetStream consumer) has them
  reported as re-read, not as dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any, overload

from pydantic import Field, field_validator, model_validator

from ...core.backoff import ExponentialBackoff
from ...core.errors import CannotShare, ConfigError, WirepipeError
from ...core.models import Duration, Secret, Size, Strict, problem_message, refuse_unshown
from ...core.redact import redact_secrets

log = logging.getLogger("wirepipe.nats")

EMBEDDED = "embedded"
SCHEMES = ("nats", "tls", "ws", "wss")  # what nats-py connects with; nats:// when a url has none
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")  # what precedes "://" in a url (in a password it may not)


# --- config ------------------------------------------------------------------------------------------


class AuthConfig(Strict):
    """``auth: {user, password}`` | ``{token}`` | ``{creds: file.creds}`` | ``{nkey_seed}`` | ``{nkey_seed_file}``"""

    user: str | None = Field(default=None, description="user name (with password)")
    password: Secret | None = Field(default=None, description="the user's password, e.g. ${NATS_PASSWORD} (never shown)")
    token: Secret | None = Field(default=None, description="an auth token, e.g. ${NATS_TOKEN} (never shown)")
    creds: str | None = Field(default=None, description="path of a .creds file (user JWT + nkey seed)")
    nkey_seed: Secret | None = Field(default=None, description="an nkey seed (SU...), e.g. ${NKEY_SEED}")
    nkey_seed_file: str | None = Field(default=None, description="path of a file holding an nkey seed")

    @model_validator(mode="before")
    @classmethod
    def _mapping(cls, data: Any) -> Any:
        if data is not None and not isinstance(data, (dict, AuthConfig)):  # `auth: "TOKEN"`: never echoed
            raise refuse_unshown("auth is a mapping: {user, password}, {token}, {creds}, {nkey_seed} or "
                                 "{nkey_seed_file}", data)
        return data

    @model_validator(mode="after")
    def _one_method(self) -> AuthConfig:
        methods = [name for name, on in (
            ("user/password", self.user is not None or self.password is not None),
            ("token", self.token is not None),
            ("creds", self.creds is not None),
            ("nkey_seed", self.nkey_seed is not None),
            ("nkey_seed_file", self.nkey_seed_file is not None),
        ) if on]
        if len(methods) > 1:
            raise ValueError(f"choose one auth method, got {', '.join(methods)}")
        if (self.user is None) != (self.password is None):
            raise ValueError("user and password go together")
        return self

    def describe(self) -> str:
        """The method, for messages: never the secret."""
        if self.user is not None:
            return f"user {self.user!r}"
        if self.token is not None:
            return "a token"
        if self.creds is not None:
            return f"creds file {self.creds}"
        if self.nkey_seed is not None or self.nkey_seed_file is not None:
            return "an nkey"
        return "no credentials"


class TLSConfig(Strict):
    """``tls: {ca: ca.pem, cert: client.pem, key: client-key.pem}``"""

    ca: str | None = Field(default=None, description="CA bundle that signed the server certificate")
    cert: str | None = Field(default=None, description="client certificate (mutual TLS)")
    key: str | None = Field(default=None, description="client private key")
    hostname: str | None = Field(default=None, description="server name to verify, when not the URL's host")
    handshake_first: bool = Field(default=False, description="TLS before the server's first message (a server configured with handshake_first)")
    insecure: bool = Field(default=False, description="skip server certificate verification (tests only)")

    @model_validator(mode="after")
    def _pair(self) -> TLSConfig:
        if (self.cert is None) != (self.key is None):
            raise ValueError("tls.cert and tls.key go together")
        return self

    def context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ca)
        if self.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.cert and self.key:
            try:
                ctx.load_cert_chain(self.cert, self.key)
            except (OSError, ssl.SSLError) as exc:
                raise WirepipeError(f"cannot load the TLS client certificate {self.cert}: {exc}") from None
        return ctx


class ReconnectConfig(Strict):
    """``reconnect: {wait: 100ms, max_wait: 5s, max_attempts: -1}`` (-1: forever)"""

    wait: Duration = Field(default=0.1, description="the first wait before reconnecting; it doubles after each failed attempt")
    max_wait: Duration = Field(default=5.0, description="the longest wait between two attempts")
    jitter: float = Field(default=0.2, ge=0, le=1, description="the fraction of each wait drawn at random, so clients do not all come back at once")
    max_attempts: int = Field(default=-1, ge=-1, description="attempts per server before giving up; -1: for ever")

    def delay(self, attempt: int) -> float:
        """The wait before reconnect attempt ``attempt + 1`` to a server (nats-py counts the attempts)."""
        return ExponentialBackoff(self.wait, self.max_wait, self.jitter).delay(attempt)


class NatsConnectionConfig(Strict):
    """The connection fields every NATS connector config has (flat, as in Benthos): what ``NatsConnection``
    takes, a connector's whole config or this alone (``NatsConnectionConfig(url=...)``)."""

    url: str | list[str] | None = Field(default=None, description="nats://host:port, a list (YAML or comma-separated: "
                                                                 "the client fails over between them), or `embedded`")
    name: str | None = Field(default=None, description="connection name shown in the server's monitoring")
    auth: AuthConfig | None = Field(default=None, description="credentials: user and password, a token, a .creds file or an nkey seed")
    tls: TLSConfig | None = Field(default=None, description="TLS: the CA, and a client certificate and key for mutual TLS")
    connect_timeout: Duration = Field(default=10.0, description="first connect, including every retry")
    reconnect: ReconnectConfig = Field(default_factory=ReconnectConfig, description="how a lost connection is retried")
    ping_interval: Duration = Field(default=20.0, description="how often the client pings the server: a dead connection is found after two unanswered pings")
    pending_size: Size = Field(default=8 * 1024 * 1024, description="outbound buffer kept while disconnected")

    @field_validator("url")
    @classmethod
    def _url_list(cls, v: str | list[str] | None) -> str | list[str] | None:
        return split_urls(v)

    @model_validator(mode="after")
    def _embedded_has_no_auth(self) -> NatsConnectionConfig:
        if is_embedded(self.url) and (self.auth is not None or self.tls is not None):
            raise ValueError("auth and tls need a NATS url; the embedded server runs without them")
        return self

    @property
    def embedded(self) -> bool:
        return is_embedded(self.url)

    def settings(self) -> dict[str, Any]:
        """The connection fields given, as a connector's config takes them, secrets in clear: what a connector
        built in this process, or a worker process of one's own, is handed (never shown: ``public_params`` is
        what may be)."""
        from pydantic import SecretStr

        def clear(value: Any) -> Any:
            if isinstance(value, SecretStr):
                return value.get_secret_value()
            return {k: clear(v) for k, v in value.items()} if isinstance(value, dict) else value

        return clear(self.model_dump(exclude_unset=True, include=set(NatsConnectionConfig.model_fields)))

    def public_params(self) -> dict[str, Any]:
        """What metrics rows and logs may show: the URL without user info, the auth method, never a secret."""
        urls = self.url if isinstance(self.url, list) else [self.url or EMBEDDED]
        out: dict[str, Any] = {"url": ",".join(redact_secrets(u) for u in urls)}
        if self.auth is not None:
            out["auth"] = self.auth.describe()
        if self.tls is not None:
            out["tls"] = True
        return out


def connection_config(url: str | None, flag: str = "--url") -> NatsConnectionConfig:
    """The connection of a command that takes a url alone (``--url`` or ``NATS_URL``): a bad one is the
    ``ConfigError`` naming the flag, as a config's ``url`` is."""
    from pydantic import ValidationError

    try:
        return NatsConnectionConfig(url=url)
    except ValidationError as exc:
        raise ConfigError(f"{flag}: {problem_message(exc.errors(include_url=False)[0])}") from None


@overload
def split_urls(url: str | list[str]) -> str | list[str]: ...
@overload
def split_urls(url: None) -> None: ...
def split_urls(url: str | list[str] | None) -> str | list[str] | None:
    """A cluster's URLs: ``"nats://a:4222, nats://b:4222"`` or a list -> a list (one URL stays a string)."""
    if url is None:
        return None
    items = [url] if isinstance(url, str) else list(url)
    urls = [u for item in items for u in _split_list(item)]
    if not urls:
        raise ValueError("the url list is empty: give nats://host:port, several comma-separated, or `embedded`")
    if len(urls) > 1 and EMBEDDED in urls:
        raise ValueError("`embedded` cannot be part of a url list: give it alone or list real servers")
    for u in urls:
        scheme, sep, _ = u.partition("://")
        if sep and _SCHEME.fullmatch(scheme) and scheme.lower() not in SCHEMES:
            raise ValueError(f"{redact_secrets(u)!r}: a NATS url's scheme is {', '.join(SCHEMES)} (or none: "
                             f"host:port), not {scheme}")
        problem = _server_problem(u)
        if problem:
            raise ValueError(f"{redact_secrets(u)!r}: {problem}")
    websocket = {u.lower().startswith(("ws://", "wss://")) for u in urls}
    if len(websocket) > 1:
        raise ValueError("a url list mixes websocket (ws://, wss://) and other servers: the client takes one kind")
    return urls[0] if len(urls) == 1 else urls


def _server_problem(url: str) -> str | None:
    """Why ``url`` can name no server (nats-py would try, and say ``Name or service not known`` after the connect
    timeout), or None: no host, a port outside 1-65535, or a path after a host:port without a scheme
    (``nats:/h:4222``, one slash short)."""
    from urllib.parse import urlsplit

    schemeless = "://" not in url
    parts = urlsplit(("nats://" if schemeless else "") + url)
    if schemeless and parts.path not in ("", "/"):
        return "not a NATS url: give nats://host:port (two slashes), e.g. nats://127.0.0.1:4222, or host:port"
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0 or (port is None and parts.netloc.rpartition("@")[2].endswith(":")):
        return "the port is a number 1-65535: give nats://host:port, e.g. nats://127.0.0.1:4222"
    if not parts.hostname:
        return "no host: give nats://host:port, e.g. nats://127.0.0.1:4222"
    return None


def _split_list(text: str) -> list[str]:
    """The servers of one comma-separated string. A comma is part of a password when what follows it up to the
    next comma or scheme has no scheme of its own and the part before has no user info yet: ``nats://u:p,w@h``
    is one server, ``nats://a:1,nats://u:p@b:2`` two (a list that mixes servers with and without credentials
    needs the scheme on each)."""
    pieces = [p.strip() for p in text.split(",")]
    out: list[str] = []
    i = 0
    while i < len(pieces):
        piece = pieces[i]
        j = i + 1
        if "@" not in piece:
            k = j
            while k < len(pieces) and "://" not in pieces[k] and "@" not in pieces[k]:
                k += 1
            if k < len(pieces) and "://" not in pieces[k] and "@" in pieces[k]:
                piece, j = ",".join(pieces[i:k + 1]), k + 1
        if piece:
            out.append(piece)
        i = j
    return out


def is_embedded(url: str | list[str] | None) -> bool:
    return url is None or url == EMBEDDED or url == [EMBEDDED]


def refuse_embedded(config: NatsConnectionConfig, workers: int) -> None:
    """What ``for_worker`` of every NATS connector checks: the embedded server is private to each process, so
    ``workers`` processes would not share one (``CannotShare`` at ``url``)."""
    if workers > 1 and config.embedded:
        raise CannotShare("url", f"{config.url or 'embedded'!r} (the default) starts a private server in each "
                                 f"process, so {workers} workers would not share one: start one with `wirepipe "
                                 "server` (or use your NATS) and give its url")


CONNECTION_PARAMS = frozenset({"url", "auth", "tls"})  # public_params(): how a connector connects, not what it reads


# --- the managed connection ----------------------------------------------------------------------------


class ConnectionStats:
    """Counters a status line, Prometheus and tests read."""

    def __init__(self) -> None:
        self.disconnects = 0
        self.reconnects = 0
        self.errors = 0
        self.slow_consumer_drops = 0


_FAIL_FAST = ("authorization violation", "authentication", "user authentication", "certificate",
              "tls", "ssl")


class NatsConnection:
    """One nats-py client with wirepipe's options, callbacks and counters.

    ``await connect()`` returns the nats-py ``Client``; ``await close()`` drains nothing
    (the connectors flush what they need first) and releases the embedded server.
    Callbacks registered with ``on_reconnect`` run after every reconnect (the JetStream
    source re-issues its pull requests there), those registered with ``on_disconnect`` at every
    disconnect (a core NATS consumer marks where its losses begin).
    """

    def __init__(self, config: NatsConnectionConfig, *, role: str = "client",
                 drop_advice: str = "speed up what reads the subscription", drops_read_again: bool = False) -> None:
        """``drop_advice``: what a message the client dropped (a slow consumer) means to the connector that owns
        this connection and what its user can do, for the warning (each source has its own remedies).
        ``drops_read_again``: the connector reads what the client drops again from its stream, so the status line,
        summary and Prometheus show them as ``reread``, never as ``dropped`` (``monitor.client_drops``)."""
        self.config = config  # a connector's config (every NATS connector config is one), or this alone
        self.role = role
        self.drop_advice = drop_advice
        self.drops_read_again = drops_read_again
        self.stats = ConnectionStats()
        self.nc: Any = None
        self.url = ""  # the server connected to (while reconnecting: the one that was lost)
        self._servers: list[str] = []
        self._trying = ""  # the server a reconnect attempt is connecting to
        self._server: Any = None
        self._reconnect_hooks: list[Callable[[], Awaitable[None]]] = []
        self._disconnect_hooks: list[Callable[[], None]] = []
        self._error_hooks: list[Callable[[Exception], bool]] = []
        self._connecting = False
        self._first_error: BaseException | None = None
        self._fail_fast: asyncio.Future[BaseException] | None = None
        self._last_drop_log = 0.0
        self._drops_logged = 0
        self._last_error_log: dict[str, float] = {}
        self.waiting: str | None = None  # "NATS at nats://...: <why>" while the first connect retries

    def on_reconnect(self, hook: Callable[[], Awaitable[None]]) -> None:
        self._reconnect_hooks.append(hook)

    def on_disconnect(self, hook: Callable[[], None]) -> None:
        """``hook()`` runs at every disconnect, before anything is received again (a consumer marks where
        its losses are)."""
        self._disconnect_hooks.append(hook)

    def on_error(self, hook: Callable[[Exception], bool]) -> None:
        """``hook(error)`` sees every asynchronous error from the server first; True: it took the error, which
        is then neither counted nor logged here (the pipeline's NATS service says itself once that the server
        refused its subscriptions)."""
        self._error_hooks.append(hook)

    @property
    def public_url(self) -> str:
        """The server this connection is on (or lost), without its credentials: what its messages name."""
        return redact_secrets(self.url) if self.url else EMBEDDED

    def _connected_url(self) -> str:
        url = self.nc.connected_url if self.nc is not None else None
        return url.geturl() if url is not None else self.url

    async def connect(self) -> Any:
        import nats

        opts = self.config
        if opts.embedded:
            from .server import EmbeddedServer

            self._server = await asyncio.to_thread(EmbeddedServer.acquire_shared)
            servers: list[str] = [self._server.url]
        else:
            servers = opts.url if isinstance(opts.url, list) else [str(opts.url)]
        self._servers = servers
        self.url = servers[0]
        kwargs: dict[str, Any] = {
            "servers": servers,
            "name": opts.name or f"wirepipe-{self.role}",
            "error_cb": self._on_error,
            "disconnected_cb": self._on_disconnect,
            "reconnected_cb": self._on_reconnect,
            "closed_cb": self._on_closed,
            "allow_reconnect": True,
            "max_reconnect_attempts": opts.reconnect.max_attempts,
            "reconnect_time_wait": opts.reconnect.wait,
            "reconnect_to_server_handler": self._next_server,
            "connect_timeout": max(1, min(5, int(opts.connect_timeout))),
            "ping_interval": max(1, int(opts.ping_interval)),
            "pending_size": opts.pending_size,
            "flush_timeout": 10.0,
        }
        auth = opts.auth
        if auth is not None:
            if auth.user is not None and auth.password is not None:
                kwargs["user"] = auth.user
                kwargs["password"] = auth.password.get_secret_value()
            elif auth.token is not None:
                kwargs["token"] = auth.token.get_secret_value()
            elif auth.creds is not None:
                kwargs["user_credentials"] = auth.creds
            elif auth.nkey_seed is not None:
                kwargs["nkeys_seed_str"] = auth.nkey_seed.get_secret_value()
            elif auth.nkey_seed_file is not None:
                kwargs["nkeys_seed"] = auth.nkey_seed_file
        if opts.tls is not None:
            kwargs["tls"] = opts.tls.context()
            if opts.tls.hostname:
                kwargs["tls_hostname"] = opts.tls.hostname
            kwargs["tls_handshake_first"] = opts.tls.handshake_first
        nc = nats.NATS()
        self._connecting = True
        self._fail_fast = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(nc.connect(**kwargs))
        first: set[asyncio.Future[Any]] = {task, self._fail_fast}
        try:
            done, _ = await asyncio.wait(first, timeout=opts.connect_timeout, return_when=asyncio.FIRST_COMPLETED)
            if task in done:
                task.result()  # raises the connect error, if any
            else:
                # Bounded: nats-py's connect may not end promptly when cancelled, nor close when it
                # never connected (seen hanging a worker under load).
                task.cancel()
                await asyncio.wait({task}, timeout=5)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(nc.close(), 5)
                await self._release_server()
                raise WirepipeError(self._connect_failure(done))
        except WirepipeError:
            raise
        except Exception as exc:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(nc.close(), 5)
            await self._release_server()
            self._first_error = self._first_error or exc
            raise WirepipeError(self._connect_failure(set())) from None
        finally:
            self._connecting = False
            self.waiting = None
        self.nc = nc
        self.url = self._connected_url()
        log.debug("%s connected to %s", self.role, self.public_url)
        return nc

    def _connect_failure(self, done: set[Any]) -> str:
        where = ", ".join(redact_secrets(u) for u in self._servers) or self.public_url
        how = self._credentials()
        err = self._first_error
        fail_fast = self._fail_fast
        fast = fail_fast is not None and fail_fast in done
        if fast and fail_fast is not None:
            err = fail_fast.result()  # the error that ended the attempt, not a later reset
        reason = _describe(err) if err is not None else "no answer"
        if fast:
            if "authoriz" in reason.lower() or "authentic" in reason.lower():
                return (f"NATS at {where} refused the connection with {how}: {reason} "
                        "(check auth: user/password, token, creds or nkey)")
            return f"NATS at {where}: TLS failed: {reason} (check tls: ca, cert, key and the url scheme)"
        return (f"cannot connect to NATS at {where} within {self.config.connect_timeout:g}s "
                f"(connect_timeout): {reason}")

    def _credentials(self) -> str:
        """The credentials a refused connect tried, for its message: the auth method, those of the url, or none."""
        if self.config.auth is not None:
            return self.config.auth.describe()
        if any(redact_secrets(u) != u for u in self._servers):
            return "the credentials in the url"
        return "no credentials"

    def _next_server(self, servers: list[Any], _info: dict[str, Any]) -> tuple[Any, float]:
        """nats-py's reconnect hook: round-robin over the pool with exponential backoff."""
        server = min(servers, key=lambda s: (s.reconnects, getattr(s, "last_attempt", 0) or 0))
        self._trying = server.uri.geturl()  # an error before the reconnect is about this one
        return server, self.config.reconnect.delay(server.reconnects)

    def client_dropped(self) -> None:
        """A message dropped by the client: a subscription's pending limits were reached (counted; logged at
        most every 10 s)."""
        self.stats.slow_consumer_drops += 1
        now = time.monotonic()
        if now - self._last_drop_log >= 10.0:
            log.warning("slow consumer: %d message(s) dropped so far on %s (the subscription's pending "
                        "limits were reached; %s)", self.stats.slow_consumer_drops, self.public_url, self.drop_advice)
            self._last_drop_log = now

    async def _on_error(self, exc: Exception) -> None:
        import nats.errors

        if isinstance(exc, nats.errors.SlowConsumerError):
            self.client_dropped()
            return
        if any(hook(exc) for hook in self._error_hooks):
            return
        self.stats.errors += 1
        if self._connecting:
            self._first_error = exc
            text = _describe(exc).lower()
            fut = self._fail_fast
            if fut is not None and not fut.done() and any(k in text for k in _FAIL_FAST):
                fut.set_result(exc)
            elif self.waiting is None:
                self.waiting = f"NATS at {self.public_url} ({_describe(exc)})"
                log.warning("waiting for %s, up to %gs (connect_timeout)", self.waiting, self.config.connect_timeout)
            return
        # The server at fault: the one connected to, or, while reconnecting, the one being tried.
        where = self.url if self.nc is None or self.nc.is_connected or not self._trying else self._trying
        key = f"{type(exc).__name__} {where}"
        now = time.monotonic()
        if now - self._last_error_log.get(key, 0.0) >= 5.0:
            self._last_error_log[key] = now
            log.warning("NATS %s (%s): %s", self.role, redact_secrets(where), _describe(exc))

    async def _on_disconnect(self) -> None:
        if self._connecting or self.nc is None or self.nc.is_closed:
            return
        self.stats.disconnects += 1
        log.warning("NATS %s disconnected from %s (disconnect #%d); reconnecting", self.role, self.public_url,
                    self.stats.disconnects)
        for hook in self._disconnect_hooks:
            hook()

    async def _on_reconnect(self) -> None:
        self.url = self._connected_url()
        self.stats.reconnects += 1
        log.warning("NATS %s reconnected to %s (reconnect #%d)", self.role, self.public_url, self.stats.reconnects)
        for hook in self._reconnect_hooks:
            try:
                await hook()
            except Exception as exc:  # a hook must not break nats-py's reconnect task
                log.error("after reconnect: %s", _describe(exc))

    async def _on_closed(self) -> None:
        log.debug("NATS %s connection to %s closed", self.role, self.public_url)

    async def flush(self, timeout: float = 10.0) -> None:
        """Round trip to the server: everything published before was received (``flush()`` without timeout can hang)."""
        if self.nc is not None and self.nc.is_connected:
            await self.nc.flush(timeout=timeout)

    async def close(self) -> None:
        nc, self.nc = self.nc, None
        if nc is not None and not nc.is_closed:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(nc.close(), 10.0)
        await self._release_server()

    async def _release_server(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            from .server import EmbeddedServer

            await asyncio.to_thread(EmbeddedServer.release_shared, server)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"  # asyncio words it "[Errno 111] Connect call failed ('127.0.0.1', 4222)"
    text = str(exc).strip() or type(exc).__name__
    if text.startswith("nats: "):
        text = text[6:]
    return redact_secrets(text)

