"""The NATS connection a command is given on its command line: ``--url``, ``--creds``, and ``--set`` for any other
field of the connection, as a pipeline's NATS connector takes it (``auth.user=me``, ``'auth.password=${NATS_PASSWORD}'``
read from the environment, ``tls.ca=ca.pem``, ``connect_timeout=10s``). ``ps`` and ``top`` ask a running system
through it; ``bench`` and ``plan`` measure against a server of one's own with it; ``dict`` and ``schema`` reach the
buckets your pipelines use through it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from ..connectors.nats.connection import NatsConnectionConfig

Creds = Annotated[str | None, typer.Option(envvar="NATS_CREDS", metavar="FILE", help=(
    "a .creds file (user JWT and nkey seed; default $NATS_CREDS)"))]
# A measuring command starts a server of its own unless --url: no credentials from the environment there.
OwnCreds = Annotated[str | None, typer.Option("--creds", metavar="FILE", help=(
    "with --url: a .creds file (user JWT and nkey seed)"))]
Sets = Annotated[list[str] | None, typer.Option("--set", metavar="PATH=VALUE", help=(
    "another field of the connection, as a pipeline's NATS connector takes it: auth.user=me, "
    "'auth.password=${NATS_PASSWORD}' (read from the environment), tls.ca=ca.pem, connect_timeout=10s"))]


def connection_from_options(url: str | list[str] | None, creds: str | None, overrides: list[str], *, where: str,
                    **fields: Any) -> NatsConnectionConfig:
    """``url``, ``creds`` (``auth.creds``) and ``fields`` (the command's own defaults), then each ``--set``
    (``${VAR}`` read from the environment), checked as a connector's connection is; ``ConfigError`` naming what
    is wrong, in ``where``."""
    import os

    from pydantic import ValidationError

    from ..connectors.nats.connection import NatsConnectionConfig
    from ..core.models import config_error
    from ..pipelines.config import apply_override, interpolate

    data: dict[str, Any] = {"url": url, **fields}
    if creds:
        data["auth"] = {"creds": creds}
    for assignment in overrides:
        apply_override(data, assignment)
    try:
        return NatsConnectionConfig.model_validate(interpolate(data, os.environ))
    except ValidationError as exc:
        raise config_error(exc, where) from None


def own_server(url: str | None, creds: str | None, overrides: list[str] | None, command: str
               ) -> NatsConnectionConfig | None:
    """The server a measuring command (``bench``, ``plan``) runs against: none (it starts one of its own) without
    ``--url``; with it, its connection. ``--creds`` and ``--set`` without ``--url`` are a ``ConfigError``: the
    server of its own takes no credentials."""
    from ..connectors.nats.connection import is_embedded
    from ..core.errors import ConfigError

    if url is None or is_embedded(url):
        if creds or overrides:
            given = " and ".join(flag for flag, on in (("--creds", creds), ("--set", overrides)) if on)
            raise ConfigError(f"{given} need --url: without it, {command} starts a NATS server of its own, which "
                              "takes no credentials", file=f"wirepipe {command}")
        return None
    return connection_from_options(url, creds, list(overrides or []), where=f"wirepipe {command}", name=f"wirepipe-{command}")


def server_connection(url: str | None, creds: str | None, overrides: list[str] | None, *, command: str, reaches: str,
                      **fields: Any) -> NatsConnectionConfig:
    """The connection of a command that works on a server that outlives it (the pipelines ``ps`` asks, the bucket
    ``dict`` publishes to): ``--url`` (or ``$NATS_URL``) is required and ``embedded`` refused, since a server of the
    command's own ends with it and takes what was written there along; ``reaches`` says what the command wants
    there. ``ConfigError`` naming what is wrong."""
    from ..connectors.nats.connection import is_embedded
    from ..core.errors import ConfigError

    where = f"wirepipe {command}"
    if not url:
        raise ConfigError(f"give --url (or set NATS_URL): {command} {reaches}", file=where)
    if is_embedded(url):
        raise ConfigError(f"--url embedded starts a server of the command's own, gone when it ends: {command} "
                          f"{reaches}", file=where)
    return connection_from_options(url, creds, list(overrides or []), where=where, name=f"wirepipe-{command.split()[0]}",
                                   **fields)


def server_or_fail(url: str | None, creds: str | None, overrides: list[str] | None, *, command: str, reaches: str,
                   **fields: Any) -> NatsConnectionConfig:
    """``server_connection``, or the command's exit 2 with the reason."""
    from ..core.errors import ConfigError
    from ..core.exit_codes import ExitCode
    from .app import fail

    try:
        return server_connection(url, creds, overrides, command=command, reaches=reaches, **fields)
    except ConfigError as exc:
        fail(str(exc), ExitCode.CONFIG)
