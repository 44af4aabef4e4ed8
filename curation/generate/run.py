"""Run generation jobs into an append-mode lake table that is also their cache.

Before generating, the jobs whose fingerprint already has a row in the output table are
skipped; the rest are generated and committed in small chunks (every `chunk_size` samples or
`flush_seconds`, whichever comes first), each chunk a new version of the table. A run killed
at any moment loses at most the chunk in flight; re-running the same command computes only
what is missing. Two runs writing the same table at once would both compute the shared
jobs (the lake keeps both rows; readers can deduplicate on `id`): run one at a time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl
import pyarrow as pa

from curation.generate.backend import Backend
from curation.generate.backends import make_backend
from curation.generate.plan import Job, Messages, Teacher, plan_jobs
from curation.generate.split import split_response
from lake.catalog import Lake
from lake.progress import Phase, phase
from schemas.generation import GENERATIONS, Completion, Mode, SamplingParams
from schemas.tables import TableContract

BackendFactory = Callable[[str], Backend]


@dataclass
class GenerationReport:
    """What a run planned, found cached, generated, and how fast."""

    output: str
    planned: int
    cached: int
    generated: int = 0
    truncated: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    versions: list[str] = field(default_factory=list)

    @property
    def tokens_per_second(self) -> float:
        return self.completion_tokens / self.seconds if self.seconds else 0.0


def cached_ids(lake: Lake, output: str, candidate_ids: Sequence[str]) -> set[str]:
    """Ids among `candidate_ids` that already have a row in the output table."""
    if not lake.has(output) or not candidate_ids:
        return set()
    wanted = pl.LazyFrame({"id": list(candidate_ids)}, schema={"id": pl.String})
    found = lake.scan(output).select("id").join(wanted, on="id", how="semi").collect()
    return set(found.get_column("id").to_list())


def completion_row(job: Job, completion: Completion, backend_name: str) -> dict[str, Any]:
    """One generations-table row: the job's provenance plus the split response."""
    split = split_response(
        completion.text,
        opened_in_prompt=completion.opened_in_prompt,
        reasoning=completion.reasoning,
    )
    request = job.request
    return {
        "id": request.key,
        "prompt_id": job.prompt_id,
        "model": job.model,
        "backend": backend_name,
        "mode": job.mode,
        "mode_switch": job.mode_switch,
        "sample_index": job.sample_index,
        "seed": request.seed,
        "temperature": float(request.sampling.temperature),
        "top_p": float(request.sampling.top_p),
        "top_k": request.sampling.top_k,
        "max_new_tokens": request.sampling.max_new_tokens,
        "messages": job.messages_json,
        "response": completion.text,
        "reasoning": split.reasoning,
        "final_answer": split.answer,
        "prompt_tokens": completion.prompt_tokens,
        "completion_tokens": completion.completion_tokens,
        "finish_reason": completion.finish_reason,
        "truncated": completion.finish_reason == "length" or not split.reasoning_closed,
    }


class ChunkedAppend:
    """Rows appended to a lake table in chunks, each chunk a new version: every `chunk_size`
    rows or `flush_seconds`, whichever comes first, and whatever is left when the block
    ends (an exception included), so a killed run loses at most the chunk in flight."""

    def __init__(
        self,
        lake: Lake,
        output: str,
        contract: TableContract,
        *,
        parents: Sequence[str],
        producer: str,
        params: dict[str, Any],
        chunk_size: int,
        flush_seconds: float,
        versions: list[str],
    ) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.lake, self.output, self.contract = lake, output, contract
        self.parents, self.producer, self.params = list(parents), producer, params
        self.chunk_size, self.flush_seconds = chunk_size, flush_seconds
        self.versions = versions
        self.buffer: list[dict[str, Any]] = []
        self.last_flush = time.monotonic()

    def add(self, row: dict[str, Any]) -> None:
        self.buffer.append(row)
        if (
            len(self.buffer) >= self.chunk_size
            or time.monotonic() - self.last_flush >= self.flush_seconds
        ):
            self.flush()

    def flush(self) -> None:
        if self.buffer:
            info = self.lake.commit(
                self.output,
                pa.Table.from_pylist(self.buffer, schema=self.contract.schema),
                kind=self.contract.kind,
                parents=self.parents,
                producer=self.producer,
                params=self.params,
                mode="append",
            )
            self.versions.append(info.ref)
            self.buffer.clear()
        self.last_flush = time.monotonic()

    def __enter__(self) -> ChunkedAppend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.flush()  # keep what was finished even when the backend failed part-way


def generate_to_lake(
    lake: Lake,
    prompts: Sequence[tuple[str, Messages]],
    *,
    output: str,
    teacher: Teacher,
    backend: str,
    modes: Sequence[Mode],
    k: int,
    sampling: SamplingParams,
    seed: int = 0,
    backend_options: dict[str, Any] | None = None,
    backend_factory: BackendFactory | None = None,
    chunk_size: int = 256,
    flush_seconds: float = 120.0,
    parents: Sequence[str] = (),
    producer: str = "cascade generate",
) -> GenerationReport:
    """Generate every missing (prompt, mode, sample) of `teacher` into table `output`.

    Models are loaded one at a time (a thinking and a non-thinking model never share the
    GPU). `backend_factory(model)` overrides how a backend is built (tests, custom servers).
    Loading and generating are progress phases (`lake.progress`).
    """
    jobs = plan_jobs(prompts, teacher, modes=modes, k=k, sampling=sampling, seed=seed)
    done = cached_ids(lake, output, [j.request.key for j in jobs])
    pending = [j for j in jobs if j.request.key not in done]
    report = GenerationReport(output=output, planned=len(jobs), cached=len(jobs) - len(pending))
    params = {
        "teacher": teacher.model,
        "no_think_model": teacher.no_think_model,
        "mode_switch": teacher.mode_switch,
        "modes": list(modes),
        "k": k,
        "seed": seed,
        "backend": backend,
        "sampling": sampling.as_dict(),
    }
    append = ChunkedAppend(
        lake,
        output,
        GENERATIONS,
        parents=parents,
        producer=producer,
        params=params,
        chunk_size=chunk_size,
        flush_seconds=flush_seconds,
        versions=report.versions,
    )
    factory = backend_factory or (
        lambda model: make_backend(backend, model, **(backend_options or {}))
    )
    by_model: dict[str, list[Job]] = {}
    for job in pending:
        by_model.setdefault(job.request.model, []).append(job)

    started = time.monotonic()
    for model, model_jobs in by_model.items():
        with phase(f"load {model}", unit="models"):
            engine = factory(model)
        try:
            with (
                append,
                phase(f"generate {output} ({model})", len(model_jobs), "samples") as shown,
            ):
                _run_model(engine, model_jobs, append, report, shown)
        finally:
            engine.close()
    report.seconds = time.monotonic() - started
    return report


def _run_model(
    engine: Backend,
    jobs: list[Job],
    append: ChunkedAppend,
    report: GenerationReport,
    shown: Phase,
) -> None:
    tokens_before, started = report.completion_tokens, time.monotonic()
    by_key = {job.request.key: job for job in jobs}
    completions: Iterator[Completion] = engine.generate([job.request for job in jobs])
    try:
        for completion in completions:
            job = by_key.get(completion.key)
            if job is None:
                raise RuntimeError(
                    f"backend {engine.name} returned an unknown key {completion.key}"
                )
            row = completion_row(job, completion, engine.name)
            append.add(row)
            report.generated += 1
            report.truncated += int(row["truncated"])
            report.completion_tokens += completion.completion_tokens
            tokens = report.completion_tokens - tokens_before
            shown.advance(note=f"{tokens / (time.monotonic() - started):,.0f} tok/s")
    finally:
        close = getattr(completions, "close", None)
        if close is not None:
            close()


def report_json(report: GenerationReport) -> str:
    """The report as one JSON line (what the CLI prints with --json)."""
    return json.dumps(
        {
            "output": report.output,
            "planned": report.planned,
            "cached": report.cached,
            "generated": report.generated,
            "truncated": report.truncated,
            "completion_tokens": report.completion_tokens,
            "seconds": round(report.seconds, 3),
            "tokens_per_second": round(report.tokens_per_second, 2),
            "versions": report.versions,
        }
    )
