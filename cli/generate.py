"""`cascade generate`: teacher responses for a prompts table or file, cached in the lake."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from cli.app import app
from cli.console import CascadeError, console, open_lake, plain
from cli.executors import EXECUTOR_OPTION, RAY_ADDRESS_OPTION, executor_session

if TYPE_CHECKING:
    from curation.environments.generate import EpisodeReport
    from curation.generate.plan import Messages
    from lake.catalog import Lake

MODE_CHOICES = {"think": ["think"], "no_think": ["no_think"]}
MODE_CHOICES["both"] = MODE_CHOICES["think"] + MODE_CHOICES["no_think"]


def load_prompts(
    lake: Lake, source: str, *, id_field: str, prompt_field: str, system: str | None
) -> tuple[list[tuple[str, Messages]], list[str]]:
    """Prompts from a file (jsonl/json/parquet/csv) or a lake table; and the lineage parents."""
    rows, parents = load_rows(
        lake, source, id_field=id_field, prompt_field=prompt_field, system=system
    )
    return [(prompt_id, tuple(row["messages"])) for prompt_id, row in rows], parents


def load_rows(
    lake: Lake, source: str, *, id_field: str, prompt_field: str, system: str | None
) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """Rows with their chat as `messages` (and every other column, which environments read),
    from a file or a lake table; and the lineage parents."""
    from curation.generate import prompts_from_records
    from curation.ingest import read_chunks

    if Path(source).exists():
        rows: list[tuple[str, dict[str, Any]]] = []
        for chunk in read_chunks(source):
            records = chunk.frame.to_dicts()
            prompts = prompts_from_records(
                records,
                origin=source,
                id_field=id_field,
                prompt_field=prompt_field,
                system=system,
                line_numbers=chunk.lines,
            )
            rows += with_messages(records, prompts)
        return rows, []
    if "/" in source or "." in source.partition("@")[0]:
        raise FileNotFoundError(f"{source}: no such file (and not a lake table name)")
    info = lake.resolve(source)
    records = lake.read(info.ref).to_pylist()
    prompts = prompts_from_records(
        records, origin=info.ref, id_field=id_field, prompt_field=prompt_field, system=system
    )
    return with_messages(records, prompts), [info.ref]


def with_messages(
    records: list[dict[str, Any]], prompts: list[tuple[str, Messages]]
) -> list[tuple[str, dict[str, Any]]]:
    return [
        (prompt_id, {**record, "messages": list(messages)})
        for record, (prompt_id, messages) in zip(records, prompts, strict=True)
    ]


@app.command("generate")
def generate_command(
    input_: str = typer.Option(
        ..., "--input", help="Lake table (name or name@N) or a jsonl/json/parquet/csv file."
    ),
    model: str = typer.Option(
        ..., "--model", help="Teacher (path or hub id; for openai the server's model name)."
    ),
    out: str = typer.Option(..., "--out", help="Generations table: append-mode, also the cache."),
    backend: str = typer.Option("hf", "--backend", help="hf | vllm | openai"),
    mode: str = typer.Option("think", "--mode", help="think | no_think | both"),
    mode_switch: str = typer.Option(
        None,
        "--mode-switch",
        help="How the mode is chosen: template (enable_thinking), flag (/think, /no_think) or "
        "model (--no-think-model). Default: model if that is given, else template.",
    ),
    no_think_model: str = typer.Option(
        None, "--no-think-model", help="A separate teacher for non-thinking responses."
    ),
    k: int = typer.Option(
        1, "-k", "--k", help="Samples per prompt and mode (seeds seed..seed+k-1)."
    ),
    max_new_tokens: int = typer.Option(1024, "--max-new-tokens"),
    temperature: float = typer.Option(0.6, "--temperature"),
    top_p: float = typer.Option(0.95, "--top-p"),
    top_k: int = typer.Option(0, "--top-k", help="0 disables top-k."),
    seed: int = typer.Option(0, "--seed", help="Seed of sample 0; sample i uses seed + i."),
    prompt_field: str = typer.Option("problem", "--prompt-field", help="Field with the prompt."),
    id_field: str = typer.Option("id", "--id-field", help="Field with the prompt id."),
    system: str = typer.Option(None, "--system", help="System prompt added to every chat."),
    limit: int = typer.Option(None, "--limit", help="Only the first N prompts."),
    batch_size: int = typer.Option(8, "--batch-size", help="hf: prompts per generate call."),
    device: str = typer.Option(None, "--device", help="hf: cpu, cuda, cuda:1 (default: auto)."),
    dtype: str = typer.Option("auto", "--dtype", help="hf/vllm: auto, float32, bfloat16, ..."),
    threads: int = typer.Option(None, "--threads", help="hf on CPU: torch threads."),
    tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", help="vllm"),
    max_model_len: int = typer.Option(None, "--max-model-len", help="vllm"),
    base_url: str = typer.Option(
        "http://127.0.0.1:8000/v1", "--base-url", help="openai: server URL ending in /v1."
    ),
    api_key_env: str = typer.Option(
        "OPENAI_API_KEY", "--api-key-env", help="openai: environment variable with the key."
    ),
    concurrency: int = typer.Option(8, "--concurrency", help="openai: requests in flight."),
    timeout: float = typer.Option(600.0, "--timeout", help="openai: seconds per request."),
    retries: int = typer.Option(5, "--retries", help="openai: retries per request."),
    chunk_size: int = typer.Option(256, "--chunk-size", help="Samples per committed version."),
    flush_seconds: float = typer.Option(
        120.0, "--flush-seconds", help="Commit at least this often (seconds)."
    ),
    env: str = typer.Option(
        None,
        "--env",
        help="Run each prompt as an episode in this environment (python, or a reward kind) "
        "and write whole conversations with tool turns, scored, to --out (an episodes table).",
    ),
    max_turns: int = typer.Option(8, "--max-turns", help="--env: model turns per episode."),
    max_total_tokens: int = typer.Option(
        16384, "--max-total-tokens", help="--env: tokens per episode, tool results included."
    ),
    tool_timeout: float = typer.Option(
        10.0, "--tool-timeout", help="--env: wall seconds per tool call."
    ),
    tool_format: str = typer.Option(
        "text",
        "--tool-format",
        help="--env: text (tools in the system prompt, calls read from the reply) or native "
        "(openai: the request's `tools`, for a server with a tool-call parser).",
    ),
    json_: bool = typer.Option(False, "--json", help="Print the report as one JSON line."),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
    executor: str = EXECUTOR_OPTION,
    ray_address: str = RAY_ADDRESS_OPTION,
) -> None:
    """Generate k teacher responses per prompt and mode; re-runs compute only what is missing."""
    from cli.progress import show_progress
    from curation.environments.generate import generate_episodes_to_lake
    from curation.generate import (
        BACKENDS,
        BackendError,
        SamplingParams,
        Teacher,
        generate_to_lake,
    )
    from curation.generate.on_cluster import generation_backend_factory
    from curation.generate.run import report_json
    from curation.ingest import IngestError
    from lake.catalog import LakeError
    from schemas.environment import EpisodeLimits
    from schemas.generation import MODE_SWITCHES
    from schemas.tables import SchemaError

    if backend not in BACKENDS:
        raise CascadeError(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if mode not in MODE_CHOICES:
        raise CascadeError(f"--mode must be think, no_think or both, got {mode!r}")
    mode_switch = mode_switch or ("model" if no_think_model else "template")
    if mode_switch not in MODE_SWITCHES:
        raise CascadeError(f"--mode-switch must be one of {', '.join(MODE_SWITCHES)}")
    options: dict[str, Any] = {
        "hf": {
            "batch_size": batch_size,
            "device": device,
            "dtype": dtype,
            "num_threads": threads,
        },
        "vllm": {
            "tensor_parallel_size": tensor_parallel_size,
            "max_model_len": max_model_len,
            "dtype": dtype,
        },
        "openai": {
            "base_url": base_url,
            "api_key_env": api_key_env,
            "concurrency": concurrency,
            "timeout": timeout,
            "max_retries": retries,
        },
    }[backend]
    try:
        teacher = Teacher(model, mode_switch=mode_switch, no_think_model=no_think_model)
        sampling = SamplingParams(max_new_tokens, temperature, top_p, top_k)
        lake = open_lake(write=True)
        if env is not None:
            if tool_format not in ("text", "native"):
                raise CascadeError(f"--tool-format must be text or native, got {tool_format!r}")
            if tool_format == "native" and backend != "openai":
                raise CascadeError("--tool-format native needs --backend openai")
            limits = EpisodeLimits(max_turns, max_total_tokens, tool_timeout)
            rows, parents = load_rows(
                lake, input_, id_field=id_field, prompt_field=prompt_field, system=system
            )
            with show_progress(progress):
                episodes = generate_episodes_to_lake(
                    lake,
                    rows[:limit] if limit is not None else rows,
                    environment=env,
                    output=out,
                    teacher=teacher,
                    backend=backend,
                    backend_options=options,
                    modes=MODE_CHOICES[mode],
                    k=k,
                    sampling=sampling,
                    limits=limits,
                    seed=seed,
                    native_tools=tool_format == "native",
                    chunk_size=chunk_size,
                    flush_seconds=flush_seconds,
                    parents=parents,
                )
            say_episodes(episodes, json_)
            return
        prompts, parents = load_prompts(
            lake, input_, id_field=id_field, prompt_field=prompt_field, system=system
        )
        if limit is not None:
            prompts = prompts[:limit]
        with executor_session(executor, ray_address) as runner, show_progress(progress):
            report = generate_to_lake(
                lake,
                prompts,
                output=out,
                teacher=teacher,
                backend=backend,
                backend_options=options,
                modes=MODE_CHOICES[mode],
                k=k,
                sampling=sampling,
                seed=seed,
                chunk_size=chunk_size,
                flush_seconds=flush_seconds,
                parents=parents,
                backend_factory=generation_backend_factory(runner, backend, options),
            )
    except (BackendError, IngestError, LakeError, SchemaError, ValueError) as exc:
        raise CascadeError(str(exc)) from None
    if json_:
        print(report_json(report))
        return
    console.print(
        f"{report.planned:,} samples planned: {report.cached:,} cached, "
        f"{report.generated:,} generated ({report.truncated:,} truncated), "
        f"{report.completion_tokens:,} tokens in {report.seconds:.1f}s "
        f"({report.tokens_per_second:,.1f} tok/s)"
    )
    if report.versions:
        first, last = report.versions[0], report.versions[-1]
        console.print(
            plain(f"committed {first if first == last else f'{first} .. {last}'}", "green")
        )


def say_episodes(report: EpisodeReport, as_json: bool) -> None:
    """Print what an --env run did: one line (or one JSON line)."""
    if as_json:
        print(json.dumps(report.__dict__))
        return
    console.print(
        f"{report.planned:,} episodes planned: {report.cached:,} cached, "
        f"{report.generated:,} run ({report.passed:,} passed) in {report.seconds:.1f}s"
    )
    if report.versions:
        first, last = report.versions[0], report.versions[-1]
        console.print(
            plain(f"committed {first if first == last else f'{first} .. {last}'}", "green")
        )
