"""Sensor readings as JSON lines, shaped like reading.schema.yaml: `humidity` is null or absent when the sensor
has none (Option<f64> in Rust).

    python generate_readings.py --count 500 > readings.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import sys

SITES = ["lyon-1", "porto-2", "oslo-dc", "wien-3"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    ts = 1_796_000_000_000_000_000
    for i in range(args.count):
        ts += rng.randint(1_000_000, 900_000_000)
        reading: dict[str, object] = {
            "sensor_id": rng.randint(1, 4_000_000_000),
            "ts_ns": ts,
            "temperature": rng.choice([-12.5, 0.25, 19.75, 21.5, 36.0]),  # exact in float32
            "ok": rng.random() > 0.05,
            "site": rng.choice(SITES),
            "tags": rng.sample(["roof", "basement", "calibrated", "v2"], k=rng.randint(0, 2)),
        }
        if i % 3 == 0:
            reading["humidity"] = round(rng.uniform(10, 90), 3)
        elif i % 3 == 1:
            reading["humidity"] = None  # null, as an absent field: Rust's None
        sys.stdout.write(json.dumps(reading) + "\n")


if __name__ == "__main__":
    main()
