"""The job YAML's ``stores:`` section: one adjunct data store per entry, checked before the job starts.

::

    stores:
      customers:
        input: {system: deltalog, stream: customers}   # any input system; a bare name means deltalog
        extractor: default                  # or package.module:function (see pipelines.adjunct.extract)
        partitioning: broadcast             # broadcast | partitioned
        persistence: persistent             # persistent | memory
        bootstrap: true                     # fill to the stream's end before the first main-input batch
        valid_for: 7d                       # validity age; absent: never too old
        dataset: unbounded                  # unbounded (a change stream) | bounded (versions sealed by end markers)
        batch_records: 100000               # most records ingested per store before one micro-batch

Two steps, because the second needs the input systems:

* ``parse_stores(raw, origin, inputs)`` checks the section itself with the
  ``StoreSpec`` model (known keys, an unknown one refused with "did you
  mean"; values), then that the extractor imports, and that no store reads a
  main input (an AD stream's records go to its store and never to the
  process function).
* ``validate_stores(stores, inputs, describe)`` asks each system through
  ``InputSystem.describe``: the stream exists, and a partitioned store's
  stream is co-partitioned with every main input: the same partition count,
  the same count before any expansion (so classes line up, see
  ``pipelines.core.adjunct``), and the same key placement (Kafka and the
  embedded log both place by Kafka's murmur2; Kinesis by MD5 hash ranges).
  The partition count is the one thing a system can prove; that the producer
  of both streams keys records alike is the user's part of the contract.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pipelines.core.adjunct import Dataset, Partitioning, Persistence, class_root
from pipelines.core.ssp import SystemStream
from pipelines.errors import ConfigError, PipelinesError
from pipelines.systems.base import StreamMetadata

if TYPE_CHECKING:
    from pipelines.jobs.stores import StoreSpec

DEFAULT_EXTRACTOR = "default"
DEFAULT_BATCH_RECORDS = 100_000

PLACEMENT = {"deltalog": "murmur2 (Kafka's default partitioner)", "kafka": "murmur2 (Kafka's default partitioner)"}
"""How a system places keys on partitions; systems not listed place by their own rule (Kinesis: MD5 ranges)."""


@dataclass(frozen=True)
class StoreConfig:
    """One store as configured; picklable, shipped to executors with the batch."""

    name: str
    input: SystemStream
    extractor: str = DEFAULT_EXTRACTOR
    partitioning: Partitioning = Partitioning.BROADCAST
    persistence: Persistence = Persistence.PERSISTENT
    bootstrap: bool = False
    valid_for: timedelta | None = None
    dataset: Dataset = Dataset.UNBOUNDED
    batch_records: int = DEFAULT_BATCH_RECORDS

    @property
    def partitioned(self) -> bool:
        return self.partitioning is Partitioning.PARTITIONED

    @property
    def bounded(self) -> bool:
        return self.dataset is Dataset.BOUNDED

    def fingerprint(self) -> dict[str, str]:
        """What the stored data depends on; a store built under another fingerprint is invalid."""
        return {
            "system": self.input.system,
            "stream": self.input.stream,
            "extractor": self.extractor,
            "partitioning": self.partitioning.value,
            "dataset": self.dataset.value,
        }

    def to_dict(self) -> dict[str, Any]:
        """The YAML form (for the job model and the operations pages)."""
        return {
            "input": {"system": self.input.system, "stream": self.input.stream},
            "extractor": self.extractor,
            "partitioning": self.partitioning.value,
            "persistence": self.persistence.value,
            "bootstrap": self.bootstrap,
            "valid_for": None if self.valid_for is None else f"{self.valid_for.total_seconds():g}s",
            "dataset": self.dataset.value,
            "batch_records": self.batch_records,
        }

    @classmethod
    def from_spec(cls, name: str, spec: StoreSpec) -> StoreConfig:
        """A store as ``StoreSpec`` checked it."""
        return cls(
            name=name,
            input=SystemStream(spec.input.system, spec.input.stream),
            extractor=spec.extractor,
            partitioning=Partitioning(spec.partitioning),
            persistence=Persistence(spec.persistence),
            bootstrap=spec.bootstrap,
            valid_for=spec.valid_for,
            dataset=Dataset(spec.dataset),
            batch_records=spec.batch_records,
        )


def parse_stores(raw: Any, origin: str = "job config", inputs: Sequence[SystemStream] = ()) -> tuple[StoreConfig, ...]:
    """The ``stores:`` section (``None`` or absent: no stores), checked as far as it can be without the systems."""
    from pipelines.jobs.stores import Stores
    from pipelines.settings import check

    specs: dict[str, StoreSpec] | None = check(Stores | None, raw, origin, at=("stores",))
    stores = tuple(StoreConfig.from_spec(name, spec) for name, spec in (specs or {}).items())
    for store in stores:
        if store.extractor != DEFAULT_EXTRACTOR:
            from pipelines.adjunct.extract import load_extractor

            try:
                load_extractor(store.extractor)
            except ConfigError as e:
                raise ConfigError(f"{origin}: stores.{store.name}.extractor: {e}") from None
    main = {s: i for i, s in enumerate(inputs)}
    for store in stores:
        if store.input in main:
            raise ConfigError(
                f"{origin}: stores.{store.name} reads {store.input}, which is also inputs[{main[store.input]}]; "
                "an AD stream's records go to its store and never to the process function: remove it from one of them"
            )
    return stores


def stream_root(meta: StreamMetadata) -> int:
    """The partition count before the stream's first expansion (classes are taken modulo it)."""
    return class_root(meta.partition_count, meta.expansions[0].from_partitions if meta.expansions else None)


def validate_stores(
    stores: Sequence[StoreConfig],
    inputs: Sequence[SystemStream],
    describe: Callable[[SystemStream], StreamMetadata],
    origin: str = "job config",
) -> dict[str, StreamMetadata]:
    """Check every store against the systems before the job starts; the AD streams' metadata, by store."""
    found: dict[SystemStream, StreamMetadata] = {}

    def meta(stream: SystemStream, what: str) -> StreamMetadata:
        if stream not in found:
            try:
                found[stream] = describe(stream)
            except PipelinesError as e:
                raise ConfigError(f"{origin}: {what} reads {stream}, which cannot be described: {e}") from None
        return found[stream]

    result = {}
    for store in stores:
        ad = meta(store.input, f"stores.{store.name}")
        result[store.name] = ad
        if not store.partitioned:
            continue
        for main in inputs:
            m = meta(main, f"input {main}")
            problems = []
            if m.partition_count != ad.partition_count:
                problems.append(f"{ad.partition_count} partitions against {m.partition_count}")
            elif stream_root(m) != stream_root(ad):
                problems.append(f"{stream_root(ad)} partitions before its first expansion against {stream_root(m)}")
            placement_ad = PLACEMENT.get(store.input.system, store.input.system)
            placement_main = PLACEMENT.get(main.system, main.system)
            if placement_ad != placement_main:
                problems.append(f"keys placed by {placement_ad} against {placement_main}")
            if problems:
                raise ConfigError(
                    f"{origin}: stores.{store.name} is partitioned but {store.input} is not co-partitioned with the "
                    f"main input {main}: {'; '.join(problems)}. A virtual task must find its keys in its own "
                    "partition of the store: give both streams the same partition count and producer keys, "
                    "or make the store 'partitioning: broadcast'"
                )
    return result
