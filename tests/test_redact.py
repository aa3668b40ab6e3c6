"""Credentials in every URL shape and every secret field stay out of what wirepipe shows: one redaction
function (``redact.redact_secrets``) on a corpus of URL shapes, the ``Secret`` type on bad values."""

from __future__ import annotations

import json
import logging
from typing import Any, get_args

import pytest
import yaml
from pydantic import SecretStr

from wirepipe.connectors import sink_models, source_models
from wirepipe.connectors.nats.connection import split_urls
from wirepipe.core.errors import ConfigError
from wirepipe.core.models import Secret
from wirepipe.core.redact import (
    SECRET_FIELDS,
    SECRET_MAPPINGS,
    RedactingFormatter,
    redact_secrets,
    redact_tree,
)
from wirepipe.pipelines.config import apply_override, pipeline_model, validate_config

PIECES = ("Alpha7Kq", "Bravo9Zx", "Charlie3Mv", "Delta5Wp", "Echo1Ty")
PASSWORD = "Alpha7Kq,Bravo9Zx'Charlie3Mv:Delta5Wp@Echo1Ty"  # every character a parser may split on
SPACED = "Alpha7Kq Bravo9Zx"

# (URL as a user writes it, the servers it names, what stays visible after redaction)
SHAPES: list[tuple[str, list[str], list[str]]] = [
    (f"nats://svc:{PASSWORD}@nats.example:4222", [f"nats://svc:{PASSWORD}@nats.example:4222"],
     ["nats://***@nats.example:4222"]),
    (f"svc:{PASSWORD}@nats.example:4222", [f"svc:{PASSWORD}@nats.example:4222"], ["***@nats.example:4222"]),
    (f"tls://{PASSWORD}@nats.example", [f"tls://{PASSWORD}@nats.example"], ["tls://***@nats.example"]),  # a token
    (f"nats://svc:{PASSWORD}@[::1]:4222", [f"nats://svc:{PASSWORD}@[::1]:4222"], ["nats://***@[::1]:4222"]),
    (f"nats://svc:{PASSWORD}@[fe80::1%eth0]:4222", [f"nats://svc:{PASSWORD}@[fe80::1%eth0]:4222"],
     ["nats://***@[fe80::1%eth0]:4222"]),
    (f"nats://svc:{PASSWORD}@a:4222,nats://svc:{PASSWORD}@b:4222",
     [f"nats://svc:{PASSWORD}@a:4222", f"nats://svc:{PASSWORD}@b:4222"], ["nats://***@a:4222", "nats://***@b:4222"]),
    (f"nats://a:4222, nats://svc:{PASSWORD}@[::1]:4222", ["nats://a:4222", f"nats://svc:{PASSWORD}@[::1]:4222"],
     ["nats://a:4222", "nats://***@[::1]:4222"]),
    (f"svc:{PASSWORD}@a:4222,svc:{PASSWORD}@b:4222", [f"svc:{PASSWORD}@a:4222", f"svc:{PASSWORD}@b:4222"],
     ["***@a:4222", "***@b:4222"]),
    (f"nats://svc:{SPACED}@nats.example:4222", [f"nats://svc:{SPACED}@nats.example:4222"],
     ["nats://***@nats.example:4222"]),
]


def leaked(text: str) -> list[str]:
    return [p for p in PIECES if p in text]


@pytest.mark.parametrize(("url", "servers", "visible"), SHAPES, ids=[f"shape{i}" for i in range(len(SHAPES))])
def test_every_url_shape_is_parsed_whole_and_shown_without_its_user_info(url: str, servers: list[str],
                                                                          visible: list[str]) -> None:
    parsed = split_urls(url)
    assert (parsed if isinstance(parsed, list) else [parsed]) == servers  # a password's comma splits nothing
    as_list = split_urls([url])
    assert (as_list if isinstance(as_list, list) else [as_list]) == servers
    texts = {
        "alone": url,
        "repr": f"Input should be a valid integer (got {url!r})",
        "in a list": str([url, "nats://other:4222"]),
        "json": json.dumps({"url": url, "n": 1}),
        "yaml": yaml.safe_dump({"sink": {"url": url}}),
        "servers": str(servers),
        "sentence": f"NATS consumer disconnected from {url}; reconnecting",
        "two lines": f"first {url}\nsecond {url}",
    }
    for how, text in texts.items():
        shown = redact_secrets(text)
        assert not leaked(shown), (how, shown)
    assert [redact_secrets(s) for s in servers] == visible  # each server as a status line or a warning shows it
    # The whole string keeps its last server at least (a list without schemes hides what precedes a password).
    assert redact_secrets(url).endswith(visible[-1])


def test_text_without_credentials_is_left_as_it_is() -> None:
    for text in ("nats://127.0.0.1:4222", "tls://[::1]:4222,nats://b:4222", "@property", "a @ b", "x@", "",
                 "cannot connect to NATS at nats://h:4222 within 2s",
                 "schema points@3: not registered", "deserialize: {schema: nats://SCHEMAS/points@12}"):
        assert redact_secrets(text) == text


def test_a_host_that_is_a_number_with_a_port_or_an_address_is_still_a_host() -> None:
    assert redact_secrets("u:p@3:4222") == "***@3:4222"
    assert redact_secrets("nats://tok@10.0.0.1") == "nats://***@10.0.0.1"


def test_a_config_tree_masks_secret_fields_and_url_user_info() -> None:
    tree = {"sink": {"url": [f"svc:{PASSWORD}@h:1"], "auth": {"user": "svc", "password": PASSWORD}},
            "source": {"auth": PASSWORD, "token": 12345678901},
            "dead_letter": {"auth": {"nkey_seed": SecretStr(PASSWORD), "creds": "svc.creds"}}}
    out = redact_tree(tree)
    assert not leaked(json.dumps(out)) and "12345678901" not in json.dumps(out)
    assert out["sink"]["auth"] == {"user": "svc", "password": "***"}
    assert out["dead_letter"]["auth"]["creds"] == "svc.creds" and out["sink"]["url"] == ["***@h:1"]
    # a plain ${VAR} names a secret and holds none: a printed config keeps running; a default may hold one
    named = redact_tree({"auth": {"password": "${NATS_PASSWORD}", "token": f"${{T:-{PASSWORD}}}"}})
    assert named == {"auth": {"password": "${NATS_PASSWORD}", "token": "***"}}


@pytest.mark.parametrize(("text", "shown"), [
    (f"http://collector:4318/v1/traces?token={PIECES[0]}", "http://collector:4318/v1/traces?***"),
    (f"Max retries exceeded with url: /v1/traces?token={PIECES[0]}&x=1 (Caused by", "url: /v1/traces?*** (Caused by"),
    (f"endpoint='https://h/v1?api_key={PIECES[0]}'", "endpoint='https://h/v1?***'"),
    (f"nats://svc:{PIECES[0]}@h:1/?x={PIECES[1]}", "nats://***@h:1/?***"),
])
def test_a_url_query_string_is_a_secret(text: str, shown: str) -> None:
    out = redact_secrets(text)
    assert shown in out and not leaked(out), out


def test_a_question_without_a_query_is_left_as_it_is() -> None:
    for text in ("is the server up?", "what? x == 1", "a?b", "http://h/v1/traces?"):
        assert redact_secrets(text) == text


def test_tracing_headers_are_masked_in_a_raw_config_and_in_a_dumped_one() -> None:
    raw = {"tracing": {"headers": {"Authorization": f"Bearer {PIECES[0]}", "X-Env": "${OTLP_KEY}"},
                       "endpoint": f"http://c:4318/v1/traces?token={PIECES[1]}"},
           "sink": {"type": "nats", "headers": "wire"}}
    out = redact_tree(raw)
    assert out == {"tracing": {"headers": {"Authorization": "***", "X-Env": "${OTLP_KEY}"},
                               "endpoint": "http://c:4318/v1/traces?***"}, "sink": {"type": "nats", "headers": "wire"}}
    cfg = validate_config({**BASE, "source": {"type": "generate", "count": 1}, "tracing": raw["tracing"]})
    dumped = json.dumps(redact_tree(cfg.model_dump(mode="json", by_alias=True)))
    assert not leaked(dumped) and '"Authorization": "***"' in dumped
    assert cfg.tracing.http_headers()["Authorization"] == f"Bearer {PIECES[0]}"  # what the exporter sends


def test_log_lines_and_their_tracebacks_are_redacted() -> None:
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "reconnect to %s failed", (f"svc:{PASSWORD}@h:1",),
                               None)
    try:
        raise OSError(f"connect to nats://svc:{PASSWORD}@h:1 refused")
    except OSError:
        import sys

        record.exc_info = sys.exc_info()
    text = RedactingFormatter("%(message)s").format(record)
    assert "***@h:1" in text and "refused" in text and not leaked(text)


BASE = {"name": "x", "source": {"type": "generate"}}


@pytest.mark.parametrize("auth", [
    {"user": "svc", "password": 98765432101}, {"token": 98765432101}, {"token": [98765432101, "x"]},
    {"user": "svc", "password": {"v": 98765432101}}, {"nkey_seed": 98765432101.5}, "98765432101", 98765432101,
    ["98765432101"],
])
@pytest.mark.parametrize("part", ["source", "sink", "dead_letter"])
def test_a_bad_secret_value_is_named_never_echoed(auth: Any, part: str) -> None:
    entry = {"type": "nats", "url": "nats://h:4222", "subject": "s", "auth": auth}
    data = {**BASE, part: entry} if part != "dead_letter" else {**BASE, "dead_letter": entry}
    if part == "source":
        data["source"] = {**entry, "count": "many"}  # a second problem: the message lists both
    with pytest.raises(ConfigError) as info:
        validate_config(data, file="p.yaml")
    message = str(info.value)
    assert "98765432101" not in message, message
    assert f"{part}.auth" in message and "not shown: it may be a secret" in message


def test_every_secret_field_is_typed_secret() -> None:
    """``redact.SECRET_FIELDS`` (what a raw config masks) and the fields typed ``models.Secret`` are the same set."""
    typed: set[str] = set()
    seen: set[Any] = set()

    def walk(model: Any) -> None:
        if model in seen or not hasattr(model, "model_fields"):
            return
        seen.add(model)
        for name, field in model.model_fields.items():
            args = get_args(field.annotation) or (field.annotation,)
            if "SecretStr" in str(field.annotation):
                typed.add(name)
                assert Secret in args, f"{model.__name__}.{name} is a SecretStr, not a Secret"
            for arg in args:
                walk(arg)

    for model in (*source_models(), *sink_models(), pipeline_model()):
        walk(model)
    assert typed == SECRET_FIELDS | {field for _, field in SECRET_MAPPINGS}


def test_set_errors_name_the_field_not_the_value() -> None:
    data = {"source": {"auth": "x"}}
    with pytest.raises(ConfigError) as info:
        apply_override(data, f"source.auth.password={PASSWORD}")
    assert "source.auth.password" in str(info.value) and not leaked(str(info.value))
