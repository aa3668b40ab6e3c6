"""Real nats-server fixtures other test modules reuse (imported by conftest.py).

- ``make_server(**options)``: a factory of embedded servers (``EmbeddedServer``'s options: ``users``,
  ``token``, ``tls``, ``max_payload``, ``options``...), each on a free port with its JetStream store in
  ``tmp_path``, all closed after the test; ``server.kill()`` (SIGKILL) and ``server.restart()`` (same port,
  same store) for fault tests.
- ``nats_server``: one of them with the defaults; ``nats_url``: its URL.
- ``make_cluster(size=3)``: a factory of local JetStream clusters (``LocalCluster``), each node with its own
  store in ``tmp_path``; ``nats_cluster``: one of 3 nodes (``.url`` is the comma-separated URL list,
  ``node(name).kill()``).
- ``tls_files``: a CA, a server certificate for 127.0.0.1 and a client certificate.
- ``expected(dataset, n)``: the records a ``generate`` source gives.

The command line is driven through ``tests/cli.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from wirepipe.connectors.nats.server import EmbeddedServer, LocalCluster
from wirepipe.datasets import get_dataset


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[Callable[..., EmbeddedServer]]:
    """A factory of started embedded servers (``EmbeddedServer``'s keyword arguments), closed after the test."""
    started: list[EmbeddedServer] = []

    def make(**options: Any) -> EmbeddedServer:
        options.setdefault("store_dir", tmp_path / ("jetstream" if not started else f"jetstream-{len(started)}"))
        server = EmbeddedServer(**options)
        started.append(server)
        return server.start()

    try:
        yield make
    finally:
        for server in reversed(started):
            server.close()


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[Callable[..., LocalCluster]]:
    """A factory of started local JetStream clusters (``LocalCluster``'s arguments), closed after the test."""
    started: list[LocalCluster] = []

    def make(size: int = 3, **options: Any) -> LocalCluster:
        options.setdefault("store_dir", tmp_path / ("cluster" if not started else f"cluster-{len(started)}"))
        cluster = LocalCluster(size, **options)
        started.append(cluster)
        return cluster.start()

    try:
        yield make
    finally:
        for cluster in reversed(started):
            cluster.close()


@pytest.fixture
def nats_server(make_server: Callable[..., EmbeddedServer]) -> EmbeddedServer:
    return make_server()


@pytest.fixture
def nats_cluster(make_cluster: Callable[..., LocalCluster]) -> LocalCluster:
    return make_cluster(3)


@pytest.fixture
def nats_url(nats_server: EmbeddedServer) -> str:
    return nats_server.url


def make_tls_files(folder: Path) -> dict[str, str]:
    """A throwaway CA, a server certificate for 127.0.0.1/localhost and a client certificate."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.timezone.utc)

    def key() -> Any:
        return ec.generate_private_key(ec.SECP256R1())

    def name(cn: str) -> Any:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def write_key(k: Any, path: Path) -> None:
        path.write_bytes(k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption()))

    ca_key = key()
    ca = (x509.CertificateBuilder().subject_name(name("wirepipe test CA")).issuer_name(name("wirepipe test CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False),
                         critical=True)
          .sign(ca_key, hashes.SHA256()))

    def leaf(cn: str, usage: Any, san: bool) -> tuple[Any, Any]:
        k = key()
        b = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(ca.subject)
             .public_key(k.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
             .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if san:
            b = b.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        return b.sign(ca_key, hashes.SHA256()), k

    server_cert, server_key = leaf("127.0.0.1", ExtendedKeyUsageOID.SERVER_AUTH, True)
    client_cert, client_key = leaf("wirepipe client", ExtendedKeyUsageOID.CLIENT_AUTH, False)
    folder.mkdir(parents=True, exist_ok=True)
    files = {name: folder / f"{name}.pem" for name in ("ca", "server", "server-key", "client", "client-key")}
    files["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files["server"].write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    write_key(server_key, files["server-key"])
    files["client"].write_bytes(client_cert.public_bytes(serialization.Encoding.PEM))
    write_key(client_key, files["client-key"])
    return {k: str(v) for k, v in files.items()}


@pytest.fixture
def tls_files(tmp_path: Path) -> dict[str, str]:
    return make_tls_files(tmp_path / "tls")


def expected(dataset: str, n: int) -> list[Any]:
    return [v for chunk in get_dataset(dataset).records(n, 0, 1000) for v in chunk]


async def fill_points(url: str, n: int) -> None:
    """The POINTS stream of the example configs (subject points.js), with n msgpack+zstd point records."""
    from wirepipe.connectors.generate import GenerateSource
    from wirepipe.connectors.nats.jetstream_sink import JetStreamSink
    from wirepipe.operators.compress import Compress
    from wirepipe.operators.serialize import Serialize
    from wirepipe.pipelines.pipeline import Pipeline

    sink = JetStreamSink("points.js", url=url,
                         stream={"name": "POINTS", "subjects": ["points.js"]})
    await Pipeline(GenerateSource("point", count=n), [Serialize("msgpack"), Compress("zstd", "fastest")], sink,
                   name="fill-points").run_async()


def slow_identity(value: Any) -> Any:
    """A ``map`` function for worker tests: 0.2 ms per record, so a worker is still busy when signalled."""
    import time

    time.sleep(0.0002)
    return value


def poison_kills(value: Any) -> Any:
    """A ``map`` function for max_deliver tests: the record whose ``i`` is ``$POISON`` SIGKILLs the worker holding it
    (each time it is delivered)."""
    import os
    import signal

    if value["i"] == int(os.environ.get("POISON", "-1")):
        os.kill(os.getpid(), signal.SIGKILL)
    return value


async def publish_numbered(url: str, n: int, stream: str = "NUM", subject: str = "num",
                           retention: str = "limits") -> None:
    """``{"i": i}`` for i in 0..n-1 as msgpack into a new stream (``retention``: limits, interest, workqueue):
    records a test can tell apart."""
    import msgpack
    import nats
    from nats.js.api import RetentionPolicy

    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name=stream, subjects=[subject], retention=RetentionPolicy(retention))
    futures = []
    for i in range(n):
        futures.append(await js.publish_async(subject, msgpack.packb({"i": i}),
                                              headers={"Content-Type": "application/msgpack", "Nats-Msg-Id": str(i)}))
        if len(futures) >= 2000:
            await asyncio.gather(*futures)
            futures = []
    await asyncio.gather(*futures)
    await nc.close()


async def consumer_info(url: str, stream: str, durable: str) -> Any:
    import nats

    nc = await nats.connect(url)
    try:
        return await nc.jetstream().consumer_info(stream, durable)
    finally:
        await nc.close()


# Headers nats-py's publish normalizes (strips, joins lines, skips an empty key): frames must write the same bytes.
ODD_HEADERS = {"Content-Type": "text/plain", "X-Pad": "  padded  ", "X-Lines": "one\r\ntwo\nthree",
               "X-Percent": "100% %d %s %%", "X-Text": "zürich €", " X-Spaced ": "k", "": "empty key skipped"}
