"""Realistic application log records, one JSON object per line: what a service's structured logger writes.

Fields come and go as in real logs: every record has ts, level, service, host and msg; a request log has
`http` (method, path, status, latency_ms); a traced request has `trace_id`; a logged-in user `user_id`; an
error `error` (type, message, and a stack only sometimes); a few carry `tags`.

    python generate_logs.py --count 2000 > logs.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from datetime import datetime, timedelta, timezone

SERVICES = {"api": ["/v1/orders", "/v1/orders/{id}", "/v1/users/{id}", "/v1/search"],
            "billing": ["/v1/invoices", "/v1/invoices/{id}/pay"],
            "auth": ["/v1/login", "/v1/token/refresh"]}
MESSAGES = {"info": ["request completed", "cache hit", "user logged in", "invoice created"],
            "debug": ["cache miss", "query plan chosen", "connection reused"],
            "warn": ["slow upstream", "retrying upstream call", "rate limit close"],
            "error": ["upstream timed out", "payment declined", "database unavailable"]}
ERRORS = ["TimeoutError", "PaymentDeclined", "OperationalError"]


def log_record(rng: random.Random, at: datetime) -> dict[str, object]:
    level = rng.choices(["debug", "info", "warn", "error"], weights=[15, 70, 10, 5])[0]
    service = rng.choice(list(SERVICES))
    record: dict[str, object] = {
        "ts": at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "level": level,
        "service": service,
        "host": f"{service}-{rng.randint(1, 3)}",
        "msg": rng.choice(MESSAGES[level]),
    }
    if rng.random() < 0.7:  # a request log
        status = 500 if level == "error" else rng.choice([200, 200, 200, 201, 204, 304, 404])
        path = rng.choice(SERVICES[service]).replace("{id}", str(rng.randint(1, 99_999)))
        record["http"] = {"method": rng.choice(["GET", "GET", "POST", "PUT"]), "path": path, "status": status,
                          "latency_ms": round(rng.lognormvariate(3, 0.8), 2)}
    if rng.random() < 0.5:
        record["trace_id"] = f"{rng.getrandbits(128):032x}"
    if rng.random() < 0.4:
        record["user_id"] = rng.randint(1, 50_000)
    if level == "error":
        error: dict[str, object] = {"type": rng.choice(ERRORS), "message": record["msg"]}
        if rng.random() < 0.3:
            error["stack"] = "\n".join(f"  at handler_{i} (app.py:{rng.randint(10, 900)})" for i in range(4))
        record["error"] = error
    if rng.random() < 0.1:
        record["tags"] = rng.sample(["canary", "eu-west", "beta", "batch", "mobile"], k=rng.randint(1, 3))
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000, help="records to write")
    parser.add_argument("--seed", type=int, default=1, help="the same seed writes the same records")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    at = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
    out = sys.stdout
    for _ in range(args.count):
        at += timedelta(milliseconds=rng.expovariate(1 / 40))
        out.write(json.dumps(log_record(rng, at), separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
