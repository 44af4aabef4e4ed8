"""Generation on a Ray cluster: one engine per worker, the cache and commits on the driver.

`sampling_on_cluster` is the plan `RayExecutor` runs for the sampling steps
(`sample_responses`, `majority_answer_check`, `measure_pass_rates`; registered in
`curation.cluster_plans`): the step runs on the driver, which keeps the generation cache and
the lake commits, with a backend factory whose engines live on the cluster's workers.
`generation_backend_factory` gives `cascade generate` the same. Ray is imported only by the
executor, when a cluster is used.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from curation.generate.backends import make_backend
from lake.cluster import RayExecutor
from lake.cluster.blocks import BlockResult, Blocks
from lake.cluster.generation import generation_backend
from lake.steps import Executor, Step


def generation_backend_factory(
    executor: Executor, backend: str, options: dict[str, Any], *, gpus_per_worker: float = 0.0
) -> Callable[[str], Any] | None:
    """A backend factory (`model -> backend`) that runs one `backend` engine (built with
    `options`) per cluster worker, or None with a local executor (`generate_to_lake` then
    builds its engine in this process)."""
    if not isinstance(executor, RayExecutor):
        return None
    return generation_backend(
        executor,
        functools.partial(make_backend, backend, **options),
        name=backend,
        gpus_per_worker=gpus_per_worker,
    )


def sampling_on_cluster(ex: RayExecutor, step: Step, table: Blocks) -> BlockResult:
    """A sampling step on the driver (its cache and commits are the lake's), over the rows
    gathered there, generating on the cluster: one engine per worker, built by the sampler's
    backend or the step's own `backend_factory`."""
    with ex.stage(step.name, "on the driver, generating on the workers"):
        result = step.run(ex.gather(table), **{**step.params, "backend_factory": factory(ex, step)})
        return ex.put_result(result)


def factory(ex: RayExecutor, step: Step) -> Callable[[str], Any]:
    """The backend factory a sampling step uses on the cluster."""
    sampler = step.params["sampler"]
    engine_factory = step.params.get("backend_factory") or functools.partial(
        make_backend, sampler.backend, **(sampler.backend_options or {})
    )
    return generation_backend(ex, engine_factory, name=sampler.backend)
