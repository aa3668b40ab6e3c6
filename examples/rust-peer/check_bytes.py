"""The Python side of the contract: every payload on the stream is, byte for byte, what Rust's
`bincode::serialize(&reading)` (bincode 1.x, its default fixint little-endian encoding) writes for the
`Reading` struct of the README, built here by hand with struct.pack; and wirepipe decodes it back.

    python check_bytes.py readings.jsonl          # exits 1 at the first payload that differs
"""

from __future__ import annotations

import asyncio
import json
import os
import struct
import sys
from typing import Any

import nats


def string(text: str) -> bytes:  # String: u64 length, then the UTF-8 bytes
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def rust_bincode(r: dict[str, Any]) -> bytes:
    """bincode 1.x of `Reading { sensor_id: u32, ts_ns: i64, temperature: f32, humidity: Option<f64>,
    ok: bool, site: String, tags: Vec<String> }`: the fields in order, nothing between them."""
    out = struct.pack("<Iqf", r["sensor_id"], r["ts_ns"], r["temperature"])
    humidity = r.get("humidity")
    out += b"\x00" if humidity is None else b"\x01" + struct.pack("<d", humidity)  # Option: tag, then value
    out += struct.pack("<?", r["ok"]) + string(r["site"])
    out += struct.pack("<Q", len(r["tags"])) + b"".join(string(t) for t in r["tags"])  # Vec: u64 count
    return out


async def payloads(url: str, count: int) -> list[bytes]:
    nc = await nats.connect(url)
    try:
        sub = await nc.jetstream().subscribe("sensors.readings", ordered_consumer=True)
        return [(await sub.next_msg(timeout=10)).data for _ in range(count)]
    finally:
        await nc.close()


def main() -> None:
    import wirepipe
    from wirepipe.core.batch import Batch

    with open(sys.argv[1], encoding="utf-8") as lines:
        records = [json.loads(line) for line in lines]
    received = asyncio.run(payloads(os.environ["NATS_URL"], len(records)))
    for i, (record, payload) in enumerate(zip(records, received, strict=True)):
        if payload != rust_bincode(record):
            sys.exit(f"record {i}: {payload.hex(' ')} on the wire, {rust_bincode(record).hex(' ')} from Rust")
    decoded = wirepipe.deserialize("bincode", schema="reading.schema.yaml")(Batch(received)).values
    if decoded != [{"humidity": None, **r} for r in records]:
        sys.exit("wirepipe did not decode the payloads back to the records")
    print(f"{len(received)} payloads are byte for byte what Rust's bincode 1.x writes for Reading")
    print(f"record 0: {received[0].hex(' ')}")


if __name__ == "__main__":
    main()
