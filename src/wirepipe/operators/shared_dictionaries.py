"""zstd dictionaries from a store, as ``compress`` and ``decompress`` use them.

A publisher says ``compress: {codec: zstd, dictionary: nats://BUCKET/NAME}``: the dictionary is
fetched once, when the pipeline starts, and every frame carries its id. A consumer says
``decompress: {codec: auto, dictionaries: nats://BUCKET}``: a frame's header names its
dictionary by id, and each id is fetched the first time a batch holds a frame that names it,
then kept for the run. ``BUCKET`` names a dictionary store, a pipeline resource
(``pipelines/resources.py``): the NATS Object Store bucket of that name unless ``resources.dictionaries``
declares another store under it (a folder of ``.zdict`` files in a test or a replay). The pipeline hands the
operator its store (``core.stores.UsesStores``) and opens it before the operator: no operator connects.

The operators are CPU operators, so the fetch is not theirs: the run loop awaits the operator's
``prepare(batch)`` on its event loop before the pass (``Pipeline``), which reads the ids of the
batch's frames and fetches the ones not yet held; the pass then finds every dictionary it needs.
While the store does not answer, ``prepare`` raises ``NotConnected`` and the loop holds the
batch and retries, as it does for a sink that is down (a JetStream source keeps its records in
progress): no record is lost or dead-lettered for an outage. A dictionary the store does not
have, one larger than ``max_output_size`` or a damaged one is remembered with the reason for
the store's ``retry_after`` (then asked for again: it may have been published since); the frames
that need it are dead-lettered with that reason and the worker goes on.

Which bytes: an id names a dictionary, it does not prove its bytes (whoever can rewrite the
bucket's ``id/<id>`` object rewrites the Object Store's digest with it; a folder holds what was copied
into it). So the publisher stamps each record with the SHA-256 digest of the exact dictionary it compressed
with (``Wirepipe-Dictionary``, ``codecs.zstd.dictionary_digest``), and here, where the bytes
are used, a fetched dictionary's digest is compared with each stamp once (per fetch and stamp,
then cached), whatever store delivered the bytes: a record whose stamp names other bytes is rejected with
both digests in the reason, never decoded to other data, and the id is asked for again after ``retry_after``
(the store may have been repaired). The frames also carry zstd's content checksum, which fails a
frame decoded with other bytes even when the record has no stamp.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..codecs.zstd import dictionary_digest, zstd_dictionary_id, zstd_frame_dictionary_id
from ..core.batch import Batch
from ..core.errors import StageError, WirepipeError
from ..core.stores import DICTIONARIES, DictionaryRef, DictionaryStore, DictionaryUnusable, StoreUse
from ..wire import Header
from .operator import failing

log = logging.getLogger("wirepipe.dictionaries")

Fn = Callable[[bytes], bytes]
RETRY_AFTER = 30.0  # until a store is handed (a store says its own)


class SharedDictionaries:
    """The zstd dictionaries of one store that an operator has fetched, by id, for one run.

    ``cap`` bounds every fetch (``max_output_size``); ``what`` names the operator in messages; ``nats`` is the
    operator's own ``nats:`` (how an undeclared bucket is reached; None: as the pipeline's NATS source or sink).
    """

    def __init__(self, ref: DictionaryRef, nats: Any = None, *, cap: int, what: str) -> None:
        self.ref = ref
        self.option = "dictionary" if ref.name else "dictionaries"  # the operator's field that names it
        self.use = StoreUse(DICTIONARIES, ref.bucket, ref.bucket, self.option, nats)
        self.cap = cap
        self.what = what
        self.retry_after = RETRY_AFTER
        self.store: DictionaryStore | None = None
        self._held: dict[int, bytes] = {}
        self._digests: dict[int, str] = {}  # id -> the held bytes' digest, computed once per fetch
        self._unusable: dict[int, tuple[str, float]] = {}  # id -> (why, when it may be asked for again)
        self._mismatched: dict[int, float] = {}  # id whose bytes a stamp disowned -> when to ask for it again
        self._built: dict[int, Fn] = {}  # id -> its decompressor (built once per fetched bytes)
        # the decompressors' functions by id, one table per stamp and local dictionary id
        self._caches: dict[tuple[str | None, int], dict[int, Fn]] = {}
        self.fetched = 0

    def hand(self, store: DictionaryStore) -> None:
        """The store the pipeline hands the operator (``UsesStores.use_store``)."""
        self.store = store
        self.retry_after = store.retry_after

    @property
    def where(self) -> str:
        """The store in messages: ``nats://DICTS``, ``folder dicts`` (the reference until one is handed)."""
        return self.store.where if self.store is not None else str(self.ref)

    async def named(self) -> bytes:
        """The publisher's dictionary (``nats://BUCKET/NAME``); ``DictionaryUnusable`` saying why it cannot be had."""
        assert self.ref.name is not None
        try:
            data: bytes = await self._require().by_name(self.ref.name, self.cap)
        except DictionaryUnusable as exc:  # its kind kept: `validate` refuses a missing one, as it does a schema
            raise type(exc)(f"{self.what}: dictionary {self.ref}: {exc}") from None
        self._hold(zstd_dictionary_id(data), data)
        return data

    def digest(self, dict_id: int) -> str:
        """The digest of the held dictionary ``dict_id`` (what a publisher stamps)."""
        return self._digests[dict_id]

    def _hold(self, dict_id: int, data: bytes) -> None:
        """Keep fetched bytes with their digest; what was built or decided from earlier bytes of that id goes."""
        if self._held.get(dict_id) != data:
            self._built.pop(dict_id, None)
        self._held[dict_id] = data
        self._digests[dict_id] = dictionary_digest(data)
        self._mismatched.pop(dict_id, None)
        for (_, local_id), by_id in self._caches.items():
            if dict_id != local_id:
                by_id.pop(dict_id, None)

    def _require(self) -> DictionaryStore:
        if self.store is None:
            raise WirepipeError(f"{self.what}: {self.option} {self.ref} comes from a dictionary store the pipeline "
                                "hands the operator: run it in a Pipeline (its resources give it the store)")
        return self.store

    # --- a consumer: by the ids the frames carry --------------------------------------------------------

    def wanted(self, batch: Batch, auto: bool) -> set[int]:
        """Ids named by the batch's zstd frames that are neither held nor known unusable (yet)."""
        values: Iterable[bytes] = batch.values
        if auto:  # only the records whose Content-Encoding says zstd
            key = Header.CONTENT_ENCODING
            values = [v for v, d in zip(batch.values, batch.headers_column(), strict=True) if d and d.get(key) == "zstd"]
        ids = {zstd_frame_dictionary_id(v) for v in values}
        ids.discard(0)
        now = time.monotonic()
        held, unusable, mismatched = self._held, self._unusable, self._mismatched
        return {i for i in ids if (i not in held and (i not in unusable or unusable[i][1] <= now))
                or (i in mismatched and mismatched[i] <= now)}

    async def fetch(self, ids: set[int]) -> None:
        """Fetch ``ids`` (raises ``NotConnected`` while the server does not answer: the caller retries)."""
        store = self._require()
        for dict_id in sorted(ids):
            try:
                self._hold(dict_id, await store.by_id(dict_id, self.cap))
            except DictionaryUnusable as exc:
                self._unusable[dict_id] = (str(exc), time.monotonic() + self.retry_after)
                log.warning("%s: zstd dictionary %d: %s (its records go to the dead letter)", self.what, dict_id, exc)
                continue
            self._unusable.pop(dict_id, None)
            self.fetched += 1
            log.info("%s: fetched zstd dictionary %d from %s (%d bytes, %s)", self.what, dict_id,
                     self.where, len(self._held[dict_id]), self._digests[dict_id])

    def decompressor(self, base: Fn, build: Callable[[bytes], Fn], local: bytes | None = None,
                     stamp: str | None = None) -> Fn:
        """``decompress(data)`` for records stamped ``stamp`` (a parsed ``Wirepipe-Dictionary``; None: no
        stamp, nothing to compare): a frame that names a dictionary by id is decompressed with that one when
        its digest is the stamp (``build`` makes a capped decompressor from a dictionary's bytes), refused
        with both digests when it is not; any other frame by ``base`` (plain zstd, or the ``local``
        dictionary given as a file, whose frames carry no id: the caller checks its stamp)."""
        local_id = zstd_dictionary_id(local) if local is not None else 0
        by_id = self._caches.setdefault((stamp, local_id), {})
        if local_id:
            by_id[local_id] = base
        frame_id = zstd_frame_dictionary_id

        def decompress(data: bytes) -> bytes:
            dict_id = frame_id(data)
            if not dict_id:
                return base(data)
            fn = by_id.get(dict_id)
            if fn is None:
                fn = self._for_id(dict_id, build, stamp, by_id)
            return fn(data)

        return decompress

    def forget_stamped(self) -> None:
        """The caller dropped the functions ``decompressor`` gave it for stamped records: stop keeping them up
        to date."""
        self._caches = {key: by_id for key, by_id in self._caches.items() if key[0] is None}

    def _for_id(self, dict_id: int, build: Callable[[bytes], Fn], stamp: str | None, by_id: dict[int, Fn]) -> Fn:
        data = self._held.get(dict_id)
        if data is None:
            why = self._unusable.get(dict_id)
            reason = why[0] if why is not None else "it was not fetched before the pass (the run loop fetches " \
                                                    "the dictionaries a batch names before its operators run)"
            raise StageError("decompress", "zstd", f"zstd dictionary {dict_id} from {self.where}: {reason}")
        held = self._digests[dict_id]
        if stamp is not None and stamp != held:
            if dict_id not in self._mismatched:
                log.warning("%s: zstd dictionary %d from %s is %s, but records stamped %s were compressed with "
                            "other bytes (the bucket's copy replaced?): they go to the dead letter; asked for "
                            "again in %gs", self.what, dict_id, self.where, held, stamp, self.retry_after)
            self._mismatched.setdefault(dict_id, time.monotonic() + self.retry_after)
            fn: Fn = failing(StageError("decompress", "zstd", disowned(dict_id, self.where, held, stamp)))
        else:
            built = self._built.get(dict_id)
            fn = built if built is not None else self._built.setdefault(dict_id, build(data))
        by_id[dict_id] = fn
        return fn


def disowned(dict_id: int | None, where: Any, held: str, stamp: str) -> str:
    """Why a record is refused when the dictionary at hand is not the one it was compressed with."""
    which = f"zstd dictionary {dict_id} from {where}" if dict_id else f"the zstd dictionary {where}"
    return (f"{which} is {held}, but the record's {Header.DICTIONARY} says it was compressed with {stamp}: "
            "other bytes would decode it to other data (refused)")
