"""A Kafka -> NATS bridge in Faust: an agent reads the `orders` topic as raw bytes and publishes each payload,
unchanged, to NATS JetStream (subject orders.kafka, stream ORDERS), with the headers a wirepipe consumer
decodes by. No re-encoding: Faust producers write `msgpack|zstd` through wirepipe's Faust codecs, which are
the bytes a wirepipe pipeline with `encode: msgpack|zstd` writes.

    faust -A bridge worker                         # with Kafka (KAFKA_BROKER) and NATS (NATS_URL)
    python bridge.py --without-kafka 500           # no Kafka: 500 orders fed to the agent directly
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
from typing import Any

import faust
import nats
from faust.serializers import codecs
from models import Order

WIRE = {"Content-Type": "application/msgpack", "Content-Encoding": "zstd"}  # what `msgpack|zstd` is on NATS

app = faust.App("orders-bridge", broker=os.environ.get("KAFKA_BROKER", "kafka://localhost:9092"), store="memory://")
orders_topic = app.topic("orders", value_serializer="raw")  # the bytes as the producers wrote them
nc: Any = None


async def connect() -> Any:
    """NATS, and the stream the bridged orders are kept in."""
    global nc
    if nc is None:
        nc = await asyncio.wait_for(nats.connect(os.environ["NATS_URL"]), 10)
        await nc.jetstream().add_stream(name="ORDERS", subjects=["orders.>"])
    return nc


@app.agent(orders_topic)
async def to_nats(payloads: Any) -> Any:
    js = (await connect()).jetstream()
    async for payload in payloads:
        await js.publish("orders.kafka", payload, headers=WIRE)  # acknowledged by JetStream: at least once
        yield payload


def sample_orders(count: int, seed: int = 5) -> list[Order]:
    rng = random.Random(seed)
    return [Order(order_id=i, customer=rng.choice(["ana", "bo", "chen", "dara"]),
                  amount=round(rng.uniform(1, 500), 2), currency=rng.choice(["EUR", "USD"]),
                  items=rng.sample(["book", "lamp", "mug", "pen", "tea"], k=rng.randint(1, 3)))
            for i in range(count)]


async def without_kafka(count: int) -> None:
    """What Faust producers would have written to Kafka, fed straight to the agent (agent.test_context)."""
    written = [codecs.dumps("msgpack|zstd", order.to_representation()) for order in sample_orders(count)]
    async with to_nats.test_context(channel=orders_topic) as agent:
        for payload in written:
            await agent.put(payload)
    await nc.close()
    print(f"bridged {count} orders from the orders topic to NATS subject orders.kafka")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--without-kafka", type=int, metavar="N", required=True,
                        help="feed N orders to the agent directly (no Kafka broker)")
    asyncio.run(without_kafka(parser.parse_args().without_kafka))
