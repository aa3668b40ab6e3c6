"""The capacity model behind ``wirepipe plan``: from microseconds per record to a deployment.

Inputs are what one record costs, per stage, on one core: the publish side (serialize +
compress + publish), the consume side (consume + decompress + deserialize) and the sink's
write, plus its size on the wire. They come from ``wirepipe bench`` results (``--bench``),
or are measured here in-process on a sample of the dataset, in a second or two, with the
same operators pipelines run (``bench.timing``); the transport stages (a publish, a pull + ack)
are then taken from figures measured with ``benchmarks/`` on a 2-core machine (``TRANSPORT_US``).

A worker spends more per record than its stages do in-process (the event loop, the socket, the
commit, GC), so over JetStream the consume side is then calibrated (``calibrate.py``): the consume
pipeline runs for a few seconds as a pool of one worker against a local nats-server, and the CPU that
worker and the server really spent per record replaces the in-process sum. Predictions carry the
error band ``ERROR_BAND``, which ``benchmarks/bench_plan.py`` checks (it runs the plan, then the pool).

The arithmetic, for a target rate R records/s:

- a worker is one process and holds one core at most (the GIL): cores of a side are
  ``R * us / 1e6``; workers are that divided by the planned ``utilization`` (0.7: headroom for
  bursts, GC and redeliveries), rounded up;
- the wire carries ``R * (payload + headers)`` bytes/s into the servers, ``replicas - 1`` times
  that between them (JetStream replication) and once more out to each consuming pipeline;
- JetStream stores ``R * (payload + headers + per-message overhead) * replicas`` bytes/s across
  the cluster: per hour, and per retention period;
- nats-server itself spends ``SERVER_US`` per message per replica (an estimate, see below).

Each figure is set against what the deployment has (cores, link, disk per node) and the
resource used most is the one that runs out first. ``predict_rate`` turns the same figures
back into records/s for a number of workers on a machine, which ``benchmarks/bench_plan.py``
checks against a measured pool.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...core.units import format_duration
from ...wire.headers import STAMP_SIZE, Header, header_size

if TYPE_CHECKING:
    from ...codecs.chain import Chain
    from ...connectors.nats.connection import NatsConnectionConfig
    from .calibrate import Calibration

# One record's transport cost on one core, microseconds: the NATS benchmarks of docs/performance (quiet 2-core machine,
# point records, wirepipe's own connectors) minus the ~2-3 us of msgpack + zstd in them. Core publish
# 155k rec/s -> 3.5; core consume 92k -> 8.5; JetStream publish (window 4096) 69k -> 12; durable pull +
# ack after flush 65k -> 13. The performance page quotes the same runs: re-measure and update together.
TRANSPORT_US = {"nats": {"publish": 3.5, "consume": 8.5}, "jetstream": {"publish": 12.0, "consume": 13.0}}
STORE_OVERHEAD = 40  # per stored message: record header, subject, sequence, timestamp, checksum
SERVER_US = 4.0  # nats-server CPU per message per replica (route + store), an estimate to re-measure
# A publishing sink's own headers, as it sends them: a 19-digit ns timestamp; over JetStream the default
# Nats-Msg-Id, ``{pipeline}-{source digest, 8 hex}-{position}-{payload digest, 16 hex}`` (a 16-character pipeline
# name and a 9-digit stream position here); over core NATS the publisher's stamps (``STAMP_SIZE``).
SENT_AT_EXAMPLE = "1" * 19
MSG_ID_EXAMPLE = f"{'p' * 16}-{'0' * 8}-{'1' * 9}-{'0' * 16}"
# How far a calibrated prediction of a pool's records/s may be off: what benchmarks/bench_plan.py measures
# (measured/predicted of pools of 1 and of a worker per core, run right after the plan) on a quiet 2-core machine.
# Where the rest of the machine comes and goes, no prediction holds it: the same pool run twice, a minute apart,
# differs by more (bench_plan.py --no-plan; docs/performance/round-four-pool.md).
ERROR_BAND = 0.2


@dataclass
class Costs:
    """What one record costs on one core (microseconds) and weighs on the wire (bytes)."""

    label: str
    publish_us: float
    consume_us: float
    sink_us: float
    wire_bytes: float
    raw_bytes: float | None = None
    origin: str = ""
    stages: dict[str, float] = field(default_factory=dict)
    calibrated: Calibration | None = None  # the consume pipeline's workers, measured (``calibrate.py``)
    # The header block a record is published with; by default the sink's own headers only.
    header_bytes: float = field(default_factory=lambda: publish_header_bytes(None, "jetstream"))

    @property
    def consume_total_us(self) -> float:
        """A consuming worker's CPU per record: as calibrated with every core busy, else the in-process stages and
        the sink."""
        return self.calibrated.busiest.worker_us if self.calibrated else self.consume_us + self.sink_us

    @property
    def server_us(self) -> float:
        """nats-server's CPU per message per replica: half of what it spent per record in the calibration (an R1
        stream: the store and the delivery with its ack), else the estimate ``SERVER_US``."""
        run = self.calibrated.busiest if self.calibrated else None
        return run.server_us / 2 if run is not None and run.server_us is not None else SERVER_US

    def calibration_lines(self) -> list[str]:
        """What the calibration measured and what the model predicts from it on its machine, with its band."""
        if self.calibrated is None:
            return ["  consume side not calibrated (in-process stages + transport figures): a worker also pays "
                    "the run loop, the socket and GC, so expect fewer records/s than this plan counts on"]
        one, full = self.calibrated.alone, self.calibrated.full
        ran = f"{one.seconds:.1f}s as 1 worker" + (f" and {full.seconds:.1f}s as {full.workers}" if full else "")
        spent = f"{one.worker_us:.1f} us of CPU per record alone" + (
            f", {full.worker_us:.1f} with every core busy" if full else "")
        server = self.calibrated.busiest.server_us
        others = max(one.others, full.others if full else 0.0)
        busy = ("" if others < 0.1 else
                f"; the rest of the machine kept up to {others:.1f} cores busy meanwhile: the predictions assume "
                f"it stays so (where it comes and goes, a pool's rate moves with it, by more than +-{ERROR_BAND:.0%})")
        cores = one.cores
        rates = ", ".join(f"{w} worker{'s' if w > 1 else ''} ~{fmt_count(predict_rate(self, w, cores))}/s"
                          for w in sorted({1, cores}))
        return [f"  calibrated: the consume pipeline ran {ran} on {self.calibrated.server}: a worker spent {spent} "
                f"(in-process stages and sink {self.consume_us + self.sink_us:.1f})"
                + (f", nats-server {server:.1f} us" if server is not None else "") + busy,
                f"  predicted on this machine ({cores} cores): {rates} (records/s, +-{ERROR_BAND:.0%})"
                + self._drift_note()]

    def _drift_note(self) -> str:
        """What the calibration's one worker, run twice seconds apart, says of the band: where it moved by more
        than the band with nothing changed, so will a pool."""
        c = self.calibrated
        drift = c.drift if c is not None else None
        if c is None or c.again is None or drift is None or abs(drift - 1) <= ERROR_BAND:
            return ""
        return (f"; but the same worker, run again seconds later, made {fmt_count(c.again.rate)}/s against "
                f"{fmt_count(c.one.rate)}/s ({drift:.2f}x, {c.one.worker_us:.0f} then {c.again.worker_us:.0f} us of "
                f"CPU a record): this machine's pace moves by itself by more than +-{ERROR_BAND:.0%}, and a pool's "
                f"rate with it")


@dataclass
class Deployment:
    """What a deployment has and keeps: nodes, their cores, link and disk; replicas and retention."""

    rate: float
    transport: str = "jetstream"
    replicas: int = 3
    retention_s: float = 7 * 86400.0
    nodes: int = 3
    cores_per_node: int = 8
    link_bps: float = 10e9
    disk_bytes: float = 1e12
    utilization: float = 0.7
    consumers: int = 1  # pipelines reading the stream


@dataclass
class Need:
    resource: str
    needed: float
    available: float
    unit: str

    @property
    def used(self) -> float:
        return self.needed / self.available if self.available else math.inf


@dataclass
class CapacityPlan:
    costs: Costs
    deployment: Deployment
    publish_workers: int
    consume_workers: int
    server_cores: float
    wire_in_bps: float  # bytes/s from publishers into the servers
    replication_bps: float  # bytes/s between servers
    wire_out_bps: float  # bytes/s to consumers
    store_per_hour: float  # bytes, whole cluster
    store_retention: float
    needs: list[Need]

    @property
    def first_to_run_out(self) -> Need:
        return max(self.needs, key=lambda n: n.used)

    def lines(self) -> list[str]:
        c, d = self.costs, self.deployment
        replicas = d.replicas if d.transport == "jetstream" else 1
        out = [
            f"plan for {fmt_count(d.rate)} records/s of {c.label} over {d.transport}"
            + (f" (R{replicas}, retention {format_duration(d.retention_s)})" if d.transport == "jetstream" else ""),
            f"  per record: publish side {c.publish_us:.1f} us, consume side {c.consume_us:.1f} us, "
            f"sink {c.sink_us:.1f} us, {c.wire_bytes:,.0f} B on the wire + {c.header_bytes:,.0f} B of headers"
            + (f" ({c.raw_bytes:,.0f} B raw)" if c.raw_bytes else "") + f"  [{c.origin}]",
            *c.calibration_lines(),
            f"  publishers: {self.publish_workers} worker processes ({d.rate * c.publish_us / 1e6:,.1f} cores busy)",
            f"  consumers:  {self.consume_workers} worker processes per pipeline "
            f"({d.rate * c.consume_total_us / 1e6:,.1f} cores busy), x{d.consumers} pipeline(s)",
            f"  nats-server: ~{self.server_cores:,.1f} cores across the cluster",
            f"  wire: {fmt_bytes(self.wire_in_bps)}/s in ({fmt_bits(self.wire_in_bps)}), "
            f"{fmt_bytes(self.replication_bps)}/s replication, {fmt_bytes(self.wire_out_bps)}/s out",
        ]
        if d.transport == "jetstream":
            out.append(f"  JetStream storage: {fmt_bytes(self.store_per_hour)} per hour, "
                       f"{fmt_bytes(self.store_retention)} per {format_duration(d.retention_s)} "
                       f"({fmt_bytes(self.store_retention / d.nodes)} per node)")
        out.append(f"  against {d.nodes} nodes x {d.cores_per_node} cores, {fmt_bits(d.link_bps / 8)} links, "
                   f"{fmt_bytes(d.disk_bytes)} disks, planned at {d.utilization:.0%} busy:")
        for n in sorted(self.needs, key=lambda n: -n.used):
            out.append(f"    {n.resource:28s} {n.used:7.0%}  ({fmt_num(n.needed)} of {fmt_num(n.available)} {n.unit})")
        first = self.first_to_run_out
        verdict = "fits" if first.used <= 1 else "does not fit"
        out.append(f"  runs out first: {first.resource} ({first.used:.0%}); the plan {verdict}"
                   + ("" if first.used <= 1 else f": scale {first.resource} by {first.used:.1f}x"))
        return out


def plan(costs: Costs, dep: Deployment) -> CapacityPlan:
    """Cores, workers, wire and storage for ``dep.rate`` records/s, and which resource runs out first.

    A million records/s at 5 us to publish and 10 us to consume each, over core NATS:

    >>> costs = Costs("point", publish_us=5.0, consume_us=10.0, sink_us=0.0, wire_bytes=100)
    >>> p = plan(costs, Deployment(rate=1_000_000, transport="core"))
    >>> p.publish_workers, p.consume_workers  # 5 and 10 cores busy, planned at 70%
    (8, 15)
    >>> p.first_to_run_out.resource, p.first_to_run_out.used > 1  # 3 nodes x 8 cores are too few
    ('cores', True)
    """
    rate = dep.rate
    replicas = dep.replicas if dep.transport == "jetstream" else 1
    pub_cores = rate * costs.publish_us / 1e6
    con_cores = rate * costs.consume_total_us / 1e6
    publish_workers = max(1, math.ceil(pub_cores / dep.utilization))
    consume_workers = max(1, math.ceil(con_cores / dep.utilization))
    server_cores = rate * costs.server_us * (replicas + dep.consumers) / 1e6
    message = costs.wire_bytes + costs.header_bytes
    wire_in = rate * message
    replication = wire_in * (replicas - 1)
    wire_out = wire_in * dep.consumers
    stored = rate * (message + STORE_OVERHEAD) * replicas if dep.transport == "jetstream" else 0.0
    per_hour, per_retention = stored * 3600, stored * dep.retention_s
    cores_needed = (publish_workers + consume_workers * dep.consumers) + server_cores / dep.utilization
    # Each node's link carries its share of client traffic and of replication, both directions summed.
    link_needed = (wire_in + wire_out + 2 * replication) / dep.nodes
    needs = [
        Need("cores", cores_needed, dep.nodes * dep.cores_per_node, "cores"),
        Need("network link per node", link_needed * 8, dep.link_bps, "bit/s"),
    ]
    if dep.transport == "jetstream":
        needs.append(Need("disk per node (retention)", per_retention / dep.nodes, dep.disk_bytes, "bytes"))
    return CapacityPlan(costs, dep, publish_workers, consume_workers * dep.consumers, server_cores, wire_in,
                        replication, wire_out, per_hour, per_retention, needs)


def predict_rate(costs: Costs, workers: int, cores: float, *, replicas: int = 1, server_us: float = SERVER_US,
                 others: float | None = None) -> float:
    """Records/s a pool of ``workers`` consuming processes reaches on a machine of ``cores`` cores.

    Each worker is capped at one core; the nats-server on the same machine takes ``server_us``
    per message per replica (+1 for the delivery) from the same cores. Calibrated costs say more
    (``calibrate.Calibration``, an R1 stream): one worker goes as fast as the calibration's one did (its
    two runs, before and after the full pool, as one window), a worker per core as fast per core as the
    calibration's full pool did (its cores shared with the server, the supervisor and the rest of the
    machine as they were then), and a pool in
    between in proportion. ``others``: the cores the rest of the machine keeps busy, where that is not
    what it kept busy during the calibration (each calibrated run scaled by its ceiling at that load,
    ``PoolRun.rate_with``). Each run is taken at its own load, not at one averaged over both: the rest of
    a full machine takes less beside a worker per core than beside one worker (the kernel shares each
    core between sessions, and the pool's session then runs on more cores), so an average would
    over-predict one worker and under-predict the full pool.
    """
    c = costs.calibrated
    if c is None:
        per_record = costs.consume_total_us
        return min(workers * 1e6 / per_record, cores * 1e6 / (per_record + server_us * (replicas + 1)))
    one, full = c.alone, c.full
    n = min(workers, cores)
    if full is None or cores <= 1:
        busy = one.others if others is None else others
        return min(workers * c.alone_rate(others),
                   max(cores - busy, 0.0) * 1e6 / (one.worker_us + 2 * costs.server_us + one.supervisor_us))
    alone = c.alone_rate(others)
    top = full.rate_with(others) * cores / full.workers  # every core busy
    return alone + (top - alone) * (n - 1) / (cores - 1)


def publish_header_bytes(headers: dict[str, str] | list[dict[str, str] | None] | None, transport: str) -> float:
    """Bytes of the header block a publishing sink sends with a record (``wire.header_size``, as nats-py writes
    it): the headers the chain's operators set (``headers``, a batch's: Content-Type, Content-Encoding,
    Wirepipe-Schema, Wirepipe-Dictionary...; per record: their mean) and the sink's own, Wirepipe-Sent-At and
    over JetStream the default Nats-Msg-Id, over core NATS the publisher's stamps.

    >>> publish_header_bytes({"Content-Type": "application/msgpack", "Content-Encoding": "zstd"}, "jetstream")
    177.0
    """
    own = {Header.SENT_AT: SENT_AT_EXAMPLE, **({Header.MSG_ID: MSG_ID_EXAMPLE} if transport == "jetstream" else {})}
    stamps = STAMP_SIZE if transport != "jetstream" else 0
    per_record = headers if isinstance(headers, list) else [headers]
    return sum(header_size({**(h or {}), **own}) for h in per_record) / max(len(per_record), 1) + stamps


def first_headers(headers: dict[str, str] | list[dict[str, str] | None] | None) -> dict[str, str] | None:
    """One record's headers of ``encoded_headers``' answer (a batch's, or each record's): the calibration's stream
    carries them, as a pipeline's does."""
    return headers[0] if isinstance(headers, list) and headers else headers if isinstance(headers, dict) else None


def encoded_headers(encode_ops: list[Any], dataset: str, values: list[Any]
                    ) -> dict[str, str] | list[dict[str, str] | None] | None:
    """The headers the chain's encoding operators set on a batch of ``values`` of ``dataset`` (as a pipeline runs
    them; a built-in dataset's records come with its schema, as the ``generate`` source gives them)."""
    from ...core.batch import Batch
    from ...datasets import DATASETS
    from ...pipelines.pipeline import Pipeline
    from ...testing import TestingSource

    batch = Batch(list(values), schema=DATASETS[dataset].schema if dataset in DATASETS else None)
    return Pipeline(TestingSource(()), encode_ops, name="plan-headers").process_batch(batch).headers


# --- where the costs come from ---------------------------------------------------------------------


def measure_costs(dataset: str, chain: str, *, transport: str = "jetstream", sink: str = "null",
                  records: int = 2000, batch_size: int = 500, rounds: int = 3, calibrate: bool = False,
                  nats: NatsConnectionConfig | None = None) -> Costs:
    """The codec stages and the sink timed in-process on a sample (best of ``rounds``); transport from ``TRANSPORT_US``;
    with ``calibrate`` (over JetStream), the consume side as a worker process spends it (``calibrated``), on the
    server ``nats`` reaches (None: a local one of its own)."""
    from ...codecs.chain import Chain
    from ...datasets import get_dataset
    from ...operators.chain_operators import chain_operators
    from ..bench.timing import best_of, chunks, time_batches

    parsed = Chain.parse(chain)
    schema = dataset if _positional(parsed) else None  # a positional format reads the dataset's schema
    encode_ops, decode_ops = chain_operators(parsed, schema)
    values = get_dataset(dataset).sample(records)
    stages: dict[str, float] = {}

    def timed(stage: str, ops: list[Any], inputs: list[list[Any]]) -> list[list[Any]]:
        best = best_of(rounds, lambda: time_batches(ops, inputs, name=f"plan-{stage}"))
        stages[stage] = best.ns / 1e3 / records
        return best.outputs

    encoded = timed("encode", encode_ops, chunks(values, batch_size))
    decoded = timed("decode", decode_ops, encoded)
    stages["sink"] = _sink_us(sink, decoded, rounds) if sink != "null" else 0.0
    wire = sum(len(v) for chunk in encoded for v in chunk) / records
    raw = get_dataset(dataset).raw_size(values) / records
    t = TRANSPORT_US[transport]
    set_headers = encoded_headers(encode_ops, dataset, values[:batch_size])
    headers = publish_header_bytes(set_headers, transport)
    costs = Costs(f"{dataset} {parsed}", stages["encode"] + t["publish"], stages["decode"] + t["consume"],
                  stages["sink"], wire, raw, origin=f"codecs and {sink} sink measured in-process now; "
                  f"{transport} transport {t['publish']:g}/{t['consume']:g} us from benchmarks", stages=stages,
                  header_bytes=headers)
    if calibrate and transport == "jetstream":
        calibrate_costs(costs, str(parsed), sink, [v for chunk in encoded for v in chunk], schema, nats,
                        headers=first_headers(set_headers))
    return costs


def calibrate_costs(costs: Costs, chain: str, sink: str, payloads: list[bytes], schema: str | None = None,
                    nats: NatsConnectionConfig | None = None, headers: dict[str, str] | None = None) -> Costs:
    """``costs`` with the consume side calibrated (``calibrate.py``): one worker process runs the pipeline of
    ``chain``'s decode (with ``schema``, a built-in dataset's name) and ``sink`` on ``payloads`` (records encoded
    with ``chain``, published with ``headers``: the chain's, as a pipeline publishes them) for a few seconds, on the
    server ``nats`` reaches (None: a local one)."""
    import asyncio

    from .calibrate import calibrate_consume

    costs.calibrated = asyncio.run(calibrate_consume(chain, sink, payloads, costs.consume_total_us, schema, nats,
                                                     headers=headers))
    costs.origin += "; consume side calibrated in worker processes now"
    return costs


def _sink_us(sink: str, decoded: list[list[Any]], rounds: int = 3) -> float:
    """A Parquet sink's cost per record: Arrow tables from the records, one file's bytes written with zstd, in
    memory (``storage.lifecycle.parquet_bytes``); the best of ``rounds`` (``timing.best_of``)."""
    import pyarrow as pa

    from ...connectors.parquet import batch_table
    from ...core.batch import Batch
    from ...storage.lifecycle import parquet_bytes
    from ..bench.timing import best_of, time_each

    if sink != "parquet":
        raise ValueError(f"sink {sink!r}: measured sinks are null and parquet")

    def write(batches: list[list[Any]]) -> bytes:
        return parquet_bytes(pa.concat_tables([batch_table(Batch(values)) for values in batches]))

    best = best_of(rounds, lambda: time_each(write, [decoded]))
    return best.ns / 1e3 / sum(map(len, decoded))


def costs_from_bench(paths: list[str], dataset: str | None, chain: str | None, *, transport: str = "jetstream",
                     sink: str = "null", calibrate: bool = False, nats: NatsConnectionConfig | None = None
                     ) -> list[Costs]:
    """Per-record costs from ``wirepipe bench`` results: for ``dataset``, else for every dataset the results
    hold (the built-in ones and one's own, ``bench --input``), each its fastest configuration unless ``chain``.
    A ``sink`` other than null is measured now, on the dataset's records (one's own are read again from the
    input file the results name)."""
    from ...codecs.chain import Chain
    from ...core.errors import WirepipeError
    from ...datasets import DATASETS
    from ..bench.timing import chunks
    from ..report import load_results, summarize

    res = load_results(paths)
    report = summarize(res.stages, res.latency, res.runs)
    want = str(Chain.parse(chain)) if chain else None
    held = list(dict.fromkeys(g.dataset for g in report.groups if g.path_ns_per_record))
    calibrating = calibrate and transport == "jetstream"
    out = []
    for name in [dataset] if dataset else held:
        groups = [g for g in report.groups if g.dataset == name and (want is None or g.chain == want)
                  and g.path_ns_per_record and not g.failed]
        if not groups:
            failed = report.failures.get(f"{name}: {want}")
            if failed:
                raise WirepipeError(f"{name} {want} failed in the bench, so it is not planned with: {failed}")
            have = sorted({f"{g.dataset} {g.chain}" for g in report.groups if not g.failed})
            raise WirepipeError(f"no configuration {name or ''} {want or ''} in {', '.join(paths)}; "
                                f"it has: {', '.join(have[:20]) or 'no stage rows'}")
        g = min(groups, key=lambda g: g.path_ns_per_record or math.inf)
        t = TRANSPORT_US[transport]
        pub, con = g.publish_side, g.consume_side
        pub_us = pub.ns_per_record / 1e3 if pub else 0.0
        con_us = con.ns_per_record / 1e3 if con else 0.0
        measured = {s.stage for s in g.stages}
        if "publish" not in measured:
            pub_us += t["publish"]
        if "consume" not in measured:
            con_us += t["consume"]
        records = _bench_records(name, res.runs) if sink != "null" or (calibrating and g.chain) else []
        sink_us = _sink_us(sink, chunks(records, 500)) if sink != "null" else 0.0
        origin = f"wirepipe bench results ({', '.join(paths)})" + (f"; {sink} sink measured in-process now"
                                                                    if sink != "null" else "")
        chain_headers = _chain_headers(g.chain, name, records)
        costs = Costs(f"{g.dataset} {g.chain or g.label}", pub_us, con_us, sink_us, g.wire_bytes_per_record or 0.0,
                      g.raw_bytes_per_record, origin=origin,
                      header_bytes=publish_header_bytes(chain_headers, transport))
        if calibrating and g.chain:
            positional = _positional(Chain.parse(g.chain))
            schema = name if positional and name in DATASETS else None  # one's own records: see the else
            if schema is not None or not positional:
                calibrate_costs(costs, g.chain, sink, _encoded(g.chain, records, schema), schema, nats,
                                headers=first_headers(chain_headers))
            else:
                costs.origin += f"; consume side not calibrated ({g.chain} is positional: its schema is the bench's)"
        out.append(costs)
    return out


def _chain_headers(chain: str | None, dataset: str, records: list[Any]
                   ) -> dict[str, str] | list[dict[str, str] | None] | None:
    """The headers a bench configuration's chain sets: its encoding run on a few of the dataset's records
    (``records``, or a built-in dataset's sample); None without a chain or records."""
    from ...codecs.chain import Chain
    from ...datasets import DATASETS
    from ...operators.chain_operators import chain_operators

    sample = records[:100] or (DATASETS[dataset].sample(100) if dataset in DATASETS else [])
    parsed = Chain.parse(chain) if chain else None
    schema = dataset if parsed is not None and _positional(parsed) else None
    if parsed is None or not sample or (schema is not None and schema not in DATASETS):
        return None
    encode_ops, _ = chain_operators(parsed, schema)
    return encoded_headers(encode_ops, dataset, sample)


def _positional(chain: Chain) -> bool:
    """The chain's format needs a schema to read its records (``msgpack-array``, ``bincode``...)."""
    from ...codecs.formats import FORMATS

    fmt = chain.format
    if not fmt:
        return False
    return FORMATS[fmt].needs_schema


def _encoded(chain: str, records: list[Any], schema: str | None = None) -> list[bytes]:
    """``records`` encoded with ``chain`` (and ``schema``) as a pipeline encodes them."""
    from ...operators.chain_operators import chain_operators
    from ..bench.timing import chunks, time_batches

    encode_ops, _ = chain_operators(chain, schema)
    return [v for chunk in time_batches(encode_ops, chunks(records, 500), name="plan-encode").outputs for v in chunk]


def _bench_records(dataset: str, runs: dict[str, Any], records: int = 2000) -> list[Any]:
    """A sample of the records a bench measured: a built-in dataset's, or those of the ``--input`` file the
    results' run metadata names (its name is the dataset's)."""
    from pathlib import Path

    from ...core.errors import MissingInput
    from ...datasets import DATASETS
    from ..bench.data import read_records

    if dataset in DATASETS:
        return DATASETS[dataset].sample(records)
    inputs = [Path(p) for run in runs.values() for p in (run.config or {}).get("inputs") or ()]
    named = [p for p in inputs if p.stem == dataset]
    for path in named:
        if path.exists():
            return read_records(path, records)
    where = f"its input file {named[0]} is not there any more" if named else "the results name no input file for it"
    raise MissingInput(f"--sink: the records of dataset {dataset!r} are needed to time the sink, and {where} "
                        "(run the plan where `wirepipe bench --input FILE` ran)")


# --- formatting ------------------------------------------------------------------------------------


def _scaled(x: float, units: tuple[str, str, str, str, str], sep: str = "", digits: int = 1) -> str:
    """``x`` with a 1000s prefix: units for T, G, M, k and 1."""
    for unit, size in zip(units, (1e12, 1e9, 1e6, 1e3), strict=False):
        if abs(x) >= size:
            return f"{x / size:,.1f}{sep}{unit}"
    return f"{x:,.{digits}f}{sep}{units[4]}".rstrip()


def fmt_num(x: float) -> str:
    return _scaled(x, ("T", "G", "M", "k", ""))


def fmt_count(x: float) -> str:
    return fmt_num(x).replace(".0", "")


def fmt_bytes(x: float) -> str:
    return _scaled(x, ("TB", "GB", "MB", "kB", "B"), " ", 0)


def fmt_bits(bytes_per_s: float) -> str:
    return _scaled(bytes_per_s * 8, ("Tbit/s", "Gbit/s", "Mbit/s", "kbit/s", "bit/s"), " ", 0)
