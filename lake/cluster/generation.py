"""Generation on the cluster: Ray Data's actor pool (`map_batches` over a callable class with
`concurrency`), one engine per worker loaded once, completions streamed back to the driver as
they finish (`generation_backend`, `ClusterBackend`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from lake.cluster.executor import RayExecutor


def generation_backend(
    ex: RayExecutor,
    engine_factory: Callable[[str], Any],
    *,
    name: str,
    workers: int | None = None,
    batch_size: int = 16,
    gpus_per_worker: float = 0.0,
    cpus_per_worker: float = 1.0,
) -> Callable[[str], Any]:
    """A backend factory (`model -> backend`) whose backends generate on the cluster.

    Each of `workers` Ray Data actors builds one engine with `engine_factory(model)` (a
    picklable callable, e.g. `functools.partial(make_backend, "vllm", **options)`) and
    serves batches of requests; completions stream back to the driver as they finish, so
    the caller (`generate_to_lake`) commits them in chunks and its fingerprint cache and
    kill-resume work as they do locally.
    """
    ex.connect()
    count = workers or max(1, int(ex.cluster_cpus // max(cpus_per_worker, 1e-9)))
    if gpus_per_worker:
        import ray

        gpus = int(ray.cluster_resources().get("GPU", 0) // gpus_per_worker)
        count = min(count, gpus) if workers is None else count

    def factory(model: str) -> ClusterBackend:
        return ClusterBackend(
            name=name,
            model=model,
            engine_factory=engine_factory,
            workers=count,
            batch_size=batch_size,
            gpus_per_worker=gpus_per_worker,
            cpus_per_worker=cpus_per_worker,
        )

    return factory


@dataclass
class ClusterBackend:
    """A generation backend whose engines run on Ray workers (see `generation_backend`)."""

    name: str
    model: str
    engine_factory: Callable[[str], Any]
    workers: int
    batch_size: int
    gpus_per_worker: float = 0.0
    cpus_per_worker: float = 1.0

    def generate(self, requests: Sequence[Any]) -> Iterator[Any]:
        """Completions in the order they finish (requests are sharded over the workers)."""
        import pickle

        import ray.data

        if not requests:
            return
        items = [{"request": pickle.dumps(r)} for r in requests]
        batch = max(1, min(self.batch_size, -(-len(items) // self.workers)))
        dataset = ray.data.from_items(items, override_num_blocks=max(1, -(-len(items) // batch)))
        completions = dataset.map_batches(
            _EngineWorker,
            fn_constructor_kwargs={"engine_factory": self.engine_factory, "model": self.model},
            batch_size=batch,
            concurrency=min(self.workers, max(1, -(-len(items) // batch))),
            num_cpus=self.cpus_per_worker,
            num_gpus=self.gpus_per_worker or None,
            batch_format="pyarrow",
        )
        for row in completions.iter_rows():
            yield pickle.loads(row["completion"])

    def close(self) -> None:
        """The engines live in the actors of one `generate` call; nothing is held here."""


class _EngineWorker:
    """A Ray Data actor holding one engine for its life (a model loads once per worker)."""

    def __init__(self, engine_factory: Callable[[str], Any], model: str) -> None:
        self.engine = engine_factory(model)

    def __call__(self, batch: Any) -> Any:
        import pickle

        import pyarrow as pa

        requests = [pickle.loads(r) for r in batch.column("request").to_pylist()]
        done = [pickle.dumps(c) for c in self.engine.generate(requests)]
        return pa.table({"completion": pa.array(done, type=pa.binary())})

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.engine.close()
