"""What a bench will cost, known before the first measurement: a short calibration and the plan in words.

Each format's serialize + deserialize and each codec level's compress + decompress is
timed on a few of the dataset's records (at most ``CALIBRATION_SECONDS`` per step, at least
one call: ``xz:9`` on small records costs tens of ms per call and must not make the
calibration itself long). Those per-record costs times N repetitions times K iterations
(plus the warm-up) give the codec phase; the transport phase adds a per-iteration cost
(a forked publisher, its connection and the consumer's; a fresh stream with JetStream) and a
per-message cost, both measured now by real iterations, of 20 records (twice) and of up to 10,000
(4 MB of raw data at most; on a busy machine both the probes and the run are slower), within
bounds set by the figures of the 2-core development machine (docs/how-to/study.md has how close
the estimate came there). The progress bar advances in these estimated seconds, so its ETA
holds from the first step, warm-up included.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...core.units import format_duration
from .combos import BenchPlan, Combo
from .data import BenchData
from .timing import Stopwatch, time_each

CALIBRATION_SECONDS = 0.02  # per timed step
CALIBRATION_RECORDS = 50
CONFIRM_ABOVE_SECONDS = 600.0  # plans longer than this ask first (or need --yes)
# Transport cost model (seconds), measured with `wirepipe bench --quick` on the 2-core development machine:
# per iteration (core NATS ~50-90 ms, JetStream ~100-150 ms with N = 2,439 small records) and per message
# (core NATS ~8-10 µs, JetStream with acks ~20 µs, from N = 25,000 points); plus the codec work each
# iteration redoes. Probes (real iterations of PROBE_RECORDS records, the larger one at most PROBE_BYTES of
# raw data) measure both on this machine as it is now; the model's figures bound what they may say (a half
# to ten times them).
TRANSPORT_PER_ITERATION = {"nats": 0.06, "jetstream": 0.1}
TRANSPORT_PER_MESSAGE = {"nats": 9e-6, "jetstream": 20e-6}
PROBE_RECORDS = (20, 10_000)
PROBE_BYTES = 4_000_000
# Around the measuring: zstd dictionaries trained (~0.1-0.2 s for the quick formats), bench.parquet, bench.md,
# report.md and report.html with its plots written (~0.4-0.7 s for the quick matrix).
AROUND_SECONDS = 0.6


@dataclass
class Estimate:
    """Seconds each step of a plan should take; the sum is the announced duration."""

    repetitions: dict[str, int] = field(default_factory=dict)  # dataset -> N
    codec: dict[tuple[str, Combo], float] = field(default_factory=dict)  # one iteration, in-process
    transport: dict[tuple[str, Combo], float] = field(default_factory=dict)  # one iteration over NATS
    iterations: int = 1
    calibration_seconds: float = 0.0
    per_iteration: float = 0.0  # a transport iteration's own cost and a message's on this machine (the probes)
    per_message: float = 0.0
    busy: float = 1.0  # this machine's transport iteration against the model's: how much slower it runs now

    @property
    def seconds(self) -> float:
        """The measuring (what the progress bar counts)."""
        codec = sum(self.codec.values()) * (self.iterations + 1)  # + the warm-up
        return codec + sum(self.transport.values()) * self.iterations

    @property
    def announced(self) -> float:
        """The whole command after its calibration: the measuring and the work around it (``AROUND_SECONDS``,
        scaled as the transport is: a busy machine writes its files slower too)."""
        return self.seconds + AROUND_SECONDS * self.busy

    def step(self, dataset: str, combo: Combo, phase: str) -> float:
        table = self.codec if phase == "codec" else self.transport
        return table.get((dataset, combo), 0.0)


def _per_record(fn: Any, items: list[Any]) -> tuple[float, list[Any]]:
    """Seconds per item of ``fn`` over at most ``CALIBRATION_SECONDS`` worth of ``items``, and its outputs
    (``timing.time_each``: one untimed call first)."""
    timed = time_each(fn, items, budget=CALIBRATION_SECONDS)
    out = timed.outputs[0]
    return timed.ns / 1e9 / max(len(out), 1), out


def calibrate(plan: BenchPlan, datas: list[BenchData], combos: list[Combo]) -> Estimate:
    """Time each step briefly on each dataset; extrapolate to the plan's N, K and transport."""
    from ...codecs.compression import get_codec
    from ...codecs.formats import FORMATS, get_format

    began = Stopwatch()
    est = Estimate(iterations=plan.iterations)
    redone: dict[tuple[str, Combo], float] = {}  # the codec work a transport iteration redoes, per record
    for data in datas:
        n = data.repetitions
        est.repetitions[data.name] = n
        sample = data.records[:CALIBRATION_RECORDS]
        payloads: dict[str, list[bytes]] = {}
        fmt_cost: dict[str, float] = {}
        for fmt in dict.fromkeys(c.format for c in combos):
            f = get_format(fmt)
            schema = data.fields if FORMATS[fmt].needs_schema else None
            try:
                ser, encoded = _per_record(f.encoder(schema), sample)
                de, _ = _per_record(f.decoder(schema, allow_pickle=True), encoded)
            except Exception:  # the measurement reports why; the estimate only needs a figure
                ser, de, encoded = 1e-6, 0.0, [b"x" * int(data.raw_bytes)]
            payloads[fmt], fmt_cost[fmt] = encoded, ser + de
        codec_cost: dict[tuple[str, str, Any], float] = {}
        for c in combos:
            key = (c.format, c.codec, c.level)
            if c.codec == "none" or key in codec_cost:
                continue
            codec = get_codec(c.codec)
            try:
                comp, packed = _per_record(codec.compressor(c.level), payloads[c.format])
                dec, _ = _per_record(codec.decompressor(), packed)
            except Exception:
                comp, dec = 1e-6, 0.0
            codec_cost[key] = comp + dec
        shared: set[tuple[str, int]] = set()  # serialize/deserialize are timed once per format and framing
        for c in combos:
            per_record = codec_cost.get((c.format, c.codec, c.level), 0.0)
            fmt_key = (c.format, c.records_per_message)
            codec_seconds = per_record * n
            if fmt_key not in shared:
                shared.add(fmt_key)
                codec_seconds += fmt_cost[c.format] * n
            est.codec[(data.name, c)] = codec_seconds
            redone[(data.name, c)] = fmt_cost[c.format] + per_record
    if plan.transport != "none":
        est.per_iteration, est.per_message = _transport_costs(plan, datas, redone)
        est.busy = est.per_iteration / TRANSPORT_PER_ITERATION[plan.transport]
        for (name, c), per_record in redone.items():
            n = est.repetitions[name]
            est.transport[(name, c)] = (est.per_iteration + -(-n // c.records_per_message) * est.per_message
                                        + per_record * n)
    est.calibration_seconds = began.seconds
    return est


def _transport_costs(plan: BenchPlan, datas: list[BenchData], redone: dict[tuple[str, Combo], float]
                     ) -> tuple[float, float]:
    """(seconds per transport iteration, per message) on this machine now (a busy machine, another server),
    from real iterations of the first dataset's first plain combination, of ``PROBE_RECORDS`` records
    (the larger at most ``PROBE_BYTES`` of raw data), the codec work taken out; the model's figures where the
    probes cannot run, and within a half to ten times them."""
    from .transport import probe

    model = TRANSPORT_PER_ITERATION[plan.transport], TRANSPORT_PER_MESSAGE[plan.transport]
    data = datas[0]
    plain = [c for c in redone if c[0] == data.name and not c[1].dictionary and c[1].records_per_message == 1]
    small = PROBE_RECORDS[0]
    large = max(2 * small, min(PROBE_RECORDS[1], int(PROBE_BYTES / max(data.raw_bytes, 1.0))))
    if not plain:
        return model
    key = min(plain, key=lambda k: k[1].codec != "none")
    times = probe(plan, data, key[1], [small, large, small])  # the small one twice: before and after
    if times is None:
        return model
    small_wire = (times[0] + times[2]) / 2 - redone[key] * small
    large_wire = times[1] - redone[key] * large
    per_message = min(max((large_wire - small_wire) / (large - small), model[1] / 2), model[1] * 10)
    per_iteration = min(max(small_wire - per_message * small, model[0] / 2), model[0] * 10)
    return per_iteration, per_message


def short_duration(seconds: float) -> str:
    """A time that may be short, with the digits it deserves: ``35 ms``, ``1.2s``, ``45s``.

    >>> short_duration(0.0354), short_duration(1.234), short_duration(45.2)
    ('35 ms', '1.2s', '45s')
    """
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else format_duration(seconds)


def describe(plan: BenchPlan, datas: list[BenchData], combos: list[Combo], est: Estimate,
             width: int | None = None) -> str:
    """The plan in a few lines (wrapped at words to ``width``): what is measured, how often, how long."""
    from ...core.table import wrap

    names = ", ".join(f"{d.name} (N={est.repetitions[d.name]:,})" for d in datas)
    server = plan.nats.public_params() if plan.nats is not None and plan.transport != "none" else None
    transport = plan.transport + (f" ({', '.join(map(str, server.values()))})" if server else "")
    lines = [f"plan: {len(datas) * len(combos)} combinations ({len(datas)} dataset(s) x {len(combos)}): {names}",
             *(f"{d.name}: {d.sample}" for d in datas),
             f"K = {plan.iterations} iterations + 1 warm-up, transport: {transport}",
             f"estimated duration: {format_duration(est.announced)} (from a {short_duration(est.calibration_seconds)} "
             "calibration on this machine" + (f", three iterations over {plan.transport} included)"
                                              if plan.transport != "none" else ")")]
    trained = [d.name for d in datas if plan.small_dict and plan.dictionary_for(d.name, d.raw_bytes)]
    if trained:
        lines.append(f"+dict rows for {', '.join(trained)}: zstd with a dictionary trained on the records (small "
                     "records gain most from one; --zstd-dict train adds them at every level)")
    from ...codecs.compression import get_codec

    if any(get_codec(c.codec).library == "zlib" for c in combos):  # the deflate family (zlib, gzip, deflate)
        from ...codecs.deflate import deflate_choice

        lines.append(f"zlib, gzip, deflate run on: {deflate_choice()} (standard bytes)")
    slow = sorted(((s, c) for (_, c), s in est.codec.items()), key=lambda x: x[0], reverse=True)[:3]
    if est.seconds > CONFIRM_ABOVE_SECONDS and slow:
        lines.append("the slowest steps: " + ", ".join(f"{c.label} ({format_duration(s * (plan.iterations + 1))})"
                                                       for s, c in slow))
    out: list[str] = []
    for i, line in enumerate(lines):
        wrapped = wrap(line, (width or 80) - 6, "")
        out += [("" if i == 0 and j == 0 else "      ") + w for j, w in enumerate(wrapped)]
    return "\n".join(out)


def narrower(plan: BenchPlan) -> str:
    """What to run instead of a long plan."""
    return ("run `wirepipe bench --quick` with the same --dataset/--input (a subset in about a minute), "
            "narrow --format/--codec/--level, lower --iterations, or pass --yes to run it anyway")
