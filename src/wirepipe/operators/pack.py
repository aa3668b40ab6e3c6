"""The pack operator: several records in one message (micro-batching on the wire).

Framing: with ``pack: {records: k}`` before ``serialize``, each message carries one
value that is the *list* of up to k records (the last message of a batch may carry
fewer), encoded by whatever format follows: a msgpack/CBOR/JSON array of records, or
one Arrow IPC stream with k rows. ``unpack`` after ``deserialize`` turns each list back
into records. Any client decodes it with the format alone; the count is the array's
length. Fewer, larger messages cost less per record to publish and compress better
(the compressor sees repetition across records), at the price of latency.

Per-record meta columns follow the records: a packed message keeps the meta of its
first record; an unpacked record repeats its message's meta, except the ``ack``
handle, which only the first record of the message carries (a message is acknowledged
once, after all its records were written). A packed message also says how many records
it carries (the ``packed`` meta column, ``Batch.record_count``), so a run counts records
after ``pack`` as before it, and its messages apart.

``unpack`` (``operators/unpack.py``) is the reverse.

In YAML ``- pack: {records: 100}``; in Python ``wirepipe.pack(100)``:

>>> from wirepipe.core.batch import Batch
>>> from wirepipe.operators.unpack import Unpack
>>> packed = Pack(2)(Batch([1, 2, 3]))
>>> packed.values, Unpack()(packed).values
([[1, 2], [3]], [1, 2, 3])
"""

from __future__ import annotations

from pydantic import Field

from ..core.batch import PACKED, Batch
from ..core.models import Strict
from ..core.stages import Stage
from .operator import RECORDS, BuildContext, Configured, Operator


class Pack(Configured, Operator):
    """Group every ``records`` consecutive records into one list value (one message)."""

    stage = Stage.PACK
    entry = "pack"
    gives = RECORDS  # a list of values
    per_record = False  # a slice boundary would cut a group

    def __init__(self, records: int) -> None:
        """``records`` as ``PackParams`` checks it in YAML (>= 1)."""
        self._init(PackParams, records=records)

    def _configure(self, params: PackParams, ctx: BuildContext) -> None:
        records = params.records
        self.records = records
        self.name = f"pack:{records}"
        self.params = {"records": records}

    def __call__(self, batch: Batch) -> Batch:
        k = self.records
        values = batch.values
        starts = range(0, len(values), k)
        batch.keep(list(starts))  # meta, subjects, headers of each group's first record
        batch.values = packs = [values[i:i + k] for i in starts]
        batch.meta[PACKED] = [len(p) for p in packs]
        return batch


# --- config: ``- pack: {records: k}`` ---------------------------------------------------------------


class PackParams(Strict):
    records: int = Field(ge=1, description="records per message")

    def build(self, ctx: BuildContext) -> list[Operator]:
        return [Pack.from_params(self, ctx)]


RANK = 50  # where it comes in "allowed operators" lists (see operators/__init__.py)
OPERATORS = {"pack": PackParams}
