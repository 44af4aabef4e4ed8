"""k samples of a model per prompt, as a recipe step: generated into the lake, cached, joined.

`Sampler` is a model as a recipe samples it (which model, where it runs, which mode, how it
samples). `generations_for` asks it for k samples of every prompt of a frame through
`generate_to_lake`, whose output table is also the cache: a re-run, a killed build resumed,
or a second recipe asking for the same (model, prompt, sampling) generates only what is
missing. `sample_responses` is the fan-out step built on it: one output row per (prompt,
sample), each with a unique `uid` (`<prompt uid>/<mode>/<sample index>`) and the prompt's
uid as `prompt_uid`, so the runner can tell which prompt each response came from.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import polars as pl
import xxhash

from curation.generate.backend import Backend
from curation.generate.plan import Teacher, plan_jobs
from curation.generate.run import generate_to_lake
from lake.catalog import Lake
from lake.steps import StepResult
from schemas.generation import SamplingParams

GENERATION_COLUMNS = (
    "id",
    "prompt_id",
    "model",
    "mode",
    "sample_index",
    "response",
    "reasoning",
    "final_answer",
    "completion_tokens",
    "finish_reason",
    "truncated",
)
"""What a sampling step copies from the generations table onto each response row."""

COMMIT_EVERY = 64
"""Samples per generations commit inside a build: a killed build loses at most this many."""


@dataclass(frozen=True)
class Sampler:
    """A model as a recipe samples it: the model (HF id, local path, or a served name),
    its backend (`hf`, `vllm`, or `openai` with `backend_options={"base_url": ...}`), the
    mode (`think` / `no_think`) and how it is selected, k, and the sampling parameters."""

    model: str
    backend: str = "hf"
    backend_options: dict[str, Any] = field(default_factory=dict)
    mode: str = "think"
    mode_switch: str = "template"
    k: int = 8
    max_new_tokens: int = 4096
    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 0
    seed: int = 0
    system_prompt: str | None = None

    @classmethod
    def from_params(cls, params: dict[str, Any], **overrides: Any) -> Sampler:
        """A Sampler from a recipe parameter (a dict with these keys); unknown keys are errors."""
        values = {**params, **overrides}
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown sampler settings {unknown}; known: {sorted(known)}")
        if not values.get("model"):
            raise ValueError("a sampler needs a model (an HF id, a local path or a served name)")
        return cls(**values)

    @property
    def sampling(self) -> SamplingParams:
        return SamplingParams(self.max_new_tokens, self.temperature, self.top_p, self.top_k)

    @property
    def teacher(self) -> Teacher:
        return Teacher(self.model, mode_switch=self.mode_switch)  # type: ignore[arg-type]

    def key(self) -> str:
        """A short hash of everything but the backend's placement: which samples these are."""
        settings = {
            k: v for k, v in asdict(self).items() if k not in ("backend", "backend_options")
        }
        encoded = json.dumps(settings, sort_keys=True, separators=(",", ":"))
        return xxhash.xxh3_64_hexdigest(encoded.encode())


def chats(df: pl.DataFrame, prompt_column: str, id_column: str, system: str | None) -> list:
    """(prompt id, chat) per distinct prompt id of the frame, in first-seen order."""
    for name in (prompt_column, id_column):
        if name not in df.columns:
            raise ValueError(f"sampling input has no column {name!r}; it has {df.columns}")
    found: dict[str, tuple[dict[str, str], ...]] = {}
    for row_id, text in df.select(id_column, prompt_column).iter_rows():
        turns = ({"role": "system", "content": system},) if system else ()
        found.setdefault(str(row_id), (*turns, {"role": "user", "content": text or ""}))
    return list(found.items())


def generations_for(
    df: pl.DataFrame,
    sampler: Sampler,
    *,
    lake: Lake,
    table: str = "generations",
    prompt_column: str = "problem",
    id_column: str = "id",
    backend_factory: Callable[[str], Backend] | None = None,
) -> tuple[pl.DataFrame, dict[str, int]]:
    """The sampler's k samples for every prompt of `df` (generating only what is missing),
    as generations rows (`GENERATION_COLUMNS`), and the planned/cached/generated counts."""
    prompts = chats(df, prompt_column, id_column, sampler.system_prompt)
    modes = [sampler.mode]
    report = generate_to_lake(
        lake,
        prompts,
        output=table,
        teacher=sampler.teacher,
        backend=sampler.backend,
        modes=modes,  # type: ignore[arg-type]
        k=sampler.k,
        sampling=sampler.sampling,
        seed=sampler.seed,
        backend_options=sampler.backend_options or None,
        backend_factory=backend_factory,
        chunk_size=COMMIT_EVERY,
        flush_seconds=30.0,
    )
    jobs = plan_jobs(
        prompts,
        sampler.teacher,
        modes=modes,  # type: ignore[arg-type]
        k=sampler.k,
        sampling=sampler.sampling,
        seed=sampler.seed,
    )
    wanted = pl.DataFrame(
        {
            "id": [j.request.key for j in jobs],
            "prompt_id": [j.prompt_id for j in jobs],
            "sample_index": [j.sample_index for j in jobs],
        },
        schema={"id": pl.String, "prompt_id": pl.String, "sample_index": pl.Int32},
    )
    stored = (
        lake.scan(table)
        .select([c for c in GENERATION_COLUMNS if c not in ("prompt_id", "sample_index")])
        .join(wanted.lazy().select("id"), on="id", how="semi")
        .unique("id", keep="first")
        .collect()
    )
    # The prompt id and sample index are the asking job's: the same sample may be cached
    # under another table's prompt id, or as another index of a sampler with another base
    # seed (sample i has seed `seed + i`, so seed 1's sample 0 is seed 0's sample 1).
    rows = wanted.join(stored, on="id", how="inner")
    counts = {"planned": report.planned, "cached": report.cached, "generated": report.generated}
    return rows.select(GENERATION_COLUMNS), counts


def sample_responses(
    df: pl.DataFrame,
    *,
    lake: Lake,
    sampler: Sampler,
    table: str = "generations",
    prompt_column: str = "problem",
    id_column: str = "id",
    backend_factory: Callable[[str], Backend] | None = None,
) -> StepResult:
    """Fan-out step: k responses of `sampler` per row; a row whose samples all failed to
    generate is dropped (`no_response`). Response rows keep the prompt's columns (its `uid`
    as `prompt_uid`, its `id_column` value as `prompt_id`) plus `generation_id` and the
    generation's columns."""
    samples, counts = generations_for(
        df,
        sampler,
        lake=lake,
        table=table,
        prompt_column=prompt_column,
        id_column=id_column,
        backend_factory=backend_factory,
    )
    if "uid" not in df.columns:
        raise ValueError("sampling needs rows with a 'uid' (prompts tables have one)")
    generated = samples.rename({"id": "generation_id", "prompt_id": "_prompt_key"})
    rows = df.with_columns(pl.col(id_column).cast(pl.String).alias("_prompt_key")).rename(
        {"uid": "prompt_uid"}
    )
    responses = (
        rows.drop([c for c in generated.columns if c in rows.columns and c != "_prompt_key"])
        .with_row_index("_row")
        .join(generated, on="_prompt_key")
        .sort("_row", "sample_index")
        .drop("_row")
        .rename({"_prompt_key": "prompt_id"})
    )
    responses = responses.select(
        pl.concat_str(
            [pl.col("prompt_uid"), pl.col("mode"), pl.col("sample_index").cast(pl.String)],
            separator="/",
        ).alias("uid"),
        pl.all(),
    )
    dropped = df.join(
        responses.select(pl.col("prompt_uid").alias("uid")).unique(), on="uid", how="anti"
    ).with_columns(pl.lit("no_response").alias("reason"))
    stats = {"rows_in": df.height, "responses": responses.height, **counts, "model": sampler.model}
    return StepResult(kept=responses, dropped=dropped, stats=stats)
