"""Teacher episodes into the lake: `cascade generate --env NAME`.

Like single-turn generation (`curation.generate.run`), the output table is its own cache: each
episode's id is the fingerprint of everything that determines it (teacher, the row's inputs,
environment, mode, sampling, limits, seed), episodes already in the table are skipped, and
finished ones are committed in chunks (every `chunk_size` episodes or `flush_seconds`), so a run
killed at any moment loses only the episodes in flight and a re-run pays for nothing twice.
Each row holds the whole conversation (tool turns included, what SFT trains on), how it
ended, and the environment's reward with its evidence; recipes keep the episodes that passed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import xxhash

from curation.environments import environment_named
from curation.environments.runner import AgentEpisode, EpisodeRunner, EpisodeStart
from curation.generate.backend import Backend
from curation.generate.backends import make_backend
from curation.generate.plan import Teacher, check_samples, model_identity
from curation.generate.run import ChunkedAppend, cached_ids
from lake.catalog import Lake
from lake.progress import phase
from schemas.environment import EPISODES, Environment, EpisodeLimits
from schemas.generation import Mode, SamplingParams


@dataclass(frozen=True)
class EpisodeJob:
    """One episode to run: its fingerprint, the prompt row, mode, sample index and seed."""

    id: str
    prompt_id: str
    row: Mapping[str, Any]
    mode: Mode
    sample_index: int
    seed: int
    model: str
    """Where the model loads from; rows name it by `identity` (`model_identity`)."""
    identity: str


@dataclass
class EpisodeReport:
    """What a run planned, found cached, ran, and how many episodes passed."""

    output: str
    planned: int
    cached: int
    generated: int = 0
    passed: int = 0
    seconds: float = 0.0
    versions: list[str] = field(default_factory=list)


def plan_episodes(
    rows: Sequence[tuple[str, Mapping[str, Any]]],
    environment: Environment,
    teacher: Teacher,
    *,
    modes: Sequence[Mode],
    k: int,
    sampling: SamplingParams,
    limits: EpisodeLimits,
    seed: int = 0,
    native_tools: bool = False,
) -> list[EpisodeJob]:
    """Every (row, mode, sample) episode; a row is (prompt id, its columns with `messages`)."""
    check_samples(modes, k)
    jobs = []
    for prompt_id, row in rows:
        inputs = {c: row.get(c) for c in sorted(set(environment.columns) | {"messages"})}
        for mode in modes:
            model = teacher.model_for(mode)
            identity = model_identity(model)
            for index in range(k):
                payload = {
                    "model": identity,
                    "inputs": inputs,
                    "environment": environment.name,
                    "mode": mode,
                    "switch": teacher.mode_switch,
                    "template_kwargs": teacher.template_kwargs_for(mode),
                    "sampling": sampling.as_dict(),
                    "limits": limits.__dict__,
                    "seed": seed + index,
                    **({"native_tools": True} if native_tools else {}),
                }
                encoded = json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str)
                key = xxhash.xxh3_128_hexdigest(encoded.encode())
                jobs.append(
                    EpisodeJob(key, prompt_id, row, mode, index, seed + index, model, identity)
                )
    return jobs


def episode_row(
    job: EpisodeJob,
    episode: AgentEpisode,
    environment: Environment,
    backend: str,
    teacher: Teacher,
    sampling: SamplingParams,
) -> dict[str, Any]:
    """One episodes-table row, the episode scored by its environment."""
    (scored,) = environment.score([job.row], [episode.transcript])
    t = episode.transcript
    return {
        "id": job.id,
        "prompt_id": job.prompt_id,
        "environment": environment.name,
        "model": job.identity,
        "backend": backend,
        "mode": job.mode,
        "mode_switch": teacher.mode_switch,
        "sample_index": job.sample_index,
        "seed": job.seed,
        "temperature": float(sampling.temperature),
        "top_p": float(sampling.top_p),
        "top_k": sampling.top_k,
        "max_new_tokens": sampling.max_new_tokens,
        "messages": json.dumps(t.messages, ensure_ascii=False),
        "tools": json.dumps(list(t.tools), ensure_ascii=False),
        "end_reason": t.end_reason,
        "turns": t.turns,
        "tool_calls": t.tool_calls,
        "tool_errors": t.tool_errors,
        "reward": scored.reward,
        "passed": None if scored.reward is None else scored.reward > 0,
        "evidence": scored.evidence,
    }


def generate_episodes_to_lake(
    lake: Lake,
    rows: Sequence[tuple[str, Mapping[str, Any]]],
    *,
    environment: str | Environment,
    output: str,
    teacher: Teacher,
    backend: str,
    modes: Sequence[Mode],
    k: int,
    sampling: SamplingParams,
    limits: EpisodeLimits | None = None,
    seed: int = 0,
    native_tools: bool = False,
    backend_options: dict[str, Any] | None = None,
    backend_factory: Callable[[str], Backend] | None = None,
    chunk_size: int = 64,
    flush_seconds: float = 120.0,
    parents: Sequence[str] = (),
) -> EpisodeReport:
    """Run every missing (row, mode, sample) episode of `teacher` in `environment` into the
    table `output` (see the module docstring)."""
    env = environment_named(environment) if isinstance(environment, str) else environment
    limits = limits or EpisodeLimits()
    jobs = plan_episodes(
        rows,
        env,
        teacher,
        modes=modes,
        k=k,
        sampling=sampling,
        limits=limits,
        seed=seed,
        native_tools=native_tools,
    )
    done = cached_ids(lake, output, [j.id for j in jobs])
    pending = [j for j in jobs if j.id not in done]
    report = EpisodeReport(output, planned=len(jobs), cached=len(jobs) - len(pending))
    params = {
        "environment": env.name,
        "teacher": teacher.model,
        "no_think_model": teacher.no_think_model,
        "mode_switch": teacher.mode_switch,
        "modes": list(modes),
        "k": k,
        "seed": seed,
        "backend": backend,
        "sampling": sampling.as_dict(),
        "limits": limits.__dict__,
        "tool_format": "native" if native_tools else "text",
    }
    factory = backend_factory or (
        lambda model: make_backend(backend, model, **(backend_options or {}))
    )
    by_model: dict[str, list[EpisodeJob]] = {}
    for job in pending:
        by_model.setdefault(job.model, []).append(job)
    started = time.monotonic()
    append = ChunkedAppend(
        lake,
        output,
        EPISODES,
        parents=parents,
        producer="cascade generate --env",
        params=params,
        chunk_size=chunk_size,
        flush_seconds=flush_seconds,
        versions=report.versions,
    )
    for model, model_jobs in by_model.items():
        with phase(f"load {model}", unit="models"):
            engine = factory(model)
        starts = [EpisodeStart(i, {**j.row}, j.mode, j.seed) for i, j in enumerate(model_jobs)]
        name = f"episodes {output} ({model}, {env.name})"
        try:
            with append, phase(name, len(model_jobs), "episodes") as shown:
                passed = 0
                for episode in EpisodeRunner(env, limits).run(
                    engine, starts, sampling, teacher=teacher, native_tools=native_tools
                ):
                    job = model_jobs[int(episode.key)]
                    row = episode_row(job, episode, env, engine.name, teacher, sampling)
                    append.add(row)
                    report.generated += 1
                    passed += bool(row["passed"])
                    shown.advance(note=f"{passed} passed")
                report.passed += passed
        finally:
            engine.close()
    report.seconds = time.monotonic() - started
    return report
