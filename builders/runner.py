"""The runner behind `cascade build dataset NAME`: ingest, run a recipe's steps, publish.

A recipe is a module with `NAME`, `DOMAIN`, `DEFAULTS` (its named parameters) and
`steps(params, build) -> list[Step]`. The runner does the bookkeeping once for every recipe:
it ingests the sources into a `<name>_sources` table, runs each step, turns each step's drops
into rows of the lake's `drops` table, counts the funnel, commits the result as a new version
of `<name>`, and writes `manifests/datasets/<name>/v<N>.json`.
"""

from __future__ import annotations

import importlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from curation.ingest import ingest
from lake.catalog import Lake
from lake.files import code_version
from lake.steps import drop_rows
from schemas.dataset_manifest import (
    BenchmarkUsed,
    DatasetManifest,
    FunnelStep,
    SourceFile,
    TablePin,
)

RECIPES = {"math_rl_v2": "builders.math_rl_v2"}


class BuildError(ValueError):
    """A build cannot start or a step failed; the message says which and why."""


@dataclass
class Build:
    """What a recipe's steps may need besides the table: the lake, and what they used."""

    lake: Lake
    profile: str
    workdir: Path
    benchmarks: list[BenchmarkUsed] = field(default_factory=list)


@dataclass
class BuildReport:
    manifest: DatasetManifest
    manifest_path: Path


def recipe_module(name: str):
    """The recipe module registered under `name`."""
    if name not in RECIPES:
        raise BuildError(f"unknown recipe {name!r}; known recipes: {', '.join(sorted(RECIPES))}")
    return importlib.import_module(RECIPES[name])


def parse_overrides(pairs: list[str], defaults: dict[str, Any]) -> dict[str, Any]:
    """Parse `key=value` overrides, typed like the recipe's default for that key."""
    params: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep:
            raise BuildError(f"bad --set {pair!r}: expected key=value")
        if key not in defaults:
            raise BuildError(
                f"unknown parameter {key!r}; parameters: {', '.join(sorted(defaults))}"
            )
        default = defaults[key]
        try:
            if isinstance(default, bool):
                if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(raw)
                value: Any = raw.lower() in ("true", "1", "yes")
            elif isinstance(default, int):
                value = int(raw)
            elif isinstance(default, float):
                value = float(raw)
            elif isinstance(default, list):
                value = [v.strip() for v in raw.split(",") if v.strip()]
            else:
                value = raw
        except ValueError:
            raise BuildError(
                f"bad --set {key}={raw!r}: expected a {type(default).__name__}"
            ) from None
        params[key] = value
    return params


def build_dataset(
    lake: Lake,
    recipe: str,
    *,
    sources: list[str] | None = None,
    overrides: dict[str, Any] | None = None,
    profile: str = "default",
    manifests_dir: str | os.PathLike[str] = "manifests",
    on_step: Callable[[FunnelStep], None] | None = None,
) -> BuildReport:
    """Build a new version of a recipe's dataset and write its manifest."""
    module = recipe_module(recipe)
    params = {**module.DEFAULTS, **(overrides or {})}
    workdir = lake.path / "work" / recipe
    workdir.mkdir(parents=True, exist_ok=True)
    build = Build(lake=lake, profile=profile, workdir=workdir)
    if profile == "demo":
        sources, demo_params = module.demo_profile(workdir)
        params = {**params, **demo_params, **(overrides or {})}
    elif profile != "default":
        raise BuildError(f"unknown profile {profile!r}: use default or demo")
    if not sources:
        raise BuildError(f"recipe {recipe} needs at least one --source (or --profile demo)")

    steps = module.steps(params, build)  # resolves benchmarks etc. before any long work
    report = ingest(
        lake,
        list(sources),
        f"{recipe}_sources",
        domain=module.DOMAIN,
        mapping=params.get("mapping") or {},
        on_error=params.get("on_error", "raise"),
    )
    inputs = report.version
    frame = pl.from_arrow(lake.read(inputs.ref))
    funnel: list[FunnelStep] = []
    drops: list[pl.DataFrame] = []
    if report.malformed:
        funnel.append(
            FunnelStep(
                step="ingest",
                rows_in=inputs.rows + len(report.malformed),
                rows_out=inputs.rows,
                dropped={"malformed": len(report.malformed)},
            )
        )
    for step in steps:
        started = time.perf_counter()
        rows_in = frame.height
        result = step.run(frame, **step.params)
        dropped = result.dropped
        if dropped.height:
            extra = dropped.select("source", "source_id").rename(
                {"source": "row_source", "source_id": "row_source_id"}
            )
            dropped = pl.concat([dropped, extra], how="horizontal")
        drops.append(
            drop_rows(
                dropped,
                input_columns=frame.columns,
                table=inputs.name,
                version=inputs.version,
                step=step.name,
            )
        )
        by_reason = (
            dict(dropped.group_by("reason").len().sort("reason").iter_rows())
            if dropped.height
            else {}
        )
        entry = FunnelStep(
            step=step.name,
            rows_in=rows_in,
            rows_out=result.kept.height,
            dropped=by_reason,
            seconds=round(time.perf_counter() - started, 3),
            stats=_jsonable(result.stats),
        )
        if rows_in != result.kept.height + dropped.height:
            raise BuildError(
                f"step {step.name}: {rows_in} rows in but {result.kept.height} kept + "
                f"{dropped.height} dropped"
            )
        funnel.append(entry)
        if on_step:
            on_step(entry)
        frame = result.kept  # measurement columns stay, so thresholds can be re-tuned in SQL

    output = lake.commit(
        recipe,
        frame,
        kind="prompts",
        parents=[inputs.ref],
        producer=f"cascade build dataset {recipe}",
        params={"profile": profile, **_jsonable(params)},
    )
    drops_pin = None
    all_drops = pl.concat([d for d in drops if d.height]) if any(d.height for d in drops) else None
    if all_drops is not None:
        info = lake.commit(
            "drops",
            all_drops,
            kind="drops",
            mode="append",
            parents=[output.ref],
            producer=f"cascade build dataset {recipe}",
            params={"table": recipe},
        )
        drops_pin = TablePin(ref=info.ref, content_hash=info.content_hash, rows=info.rows)

    manifest = DatasetManifest(
        name=recipe,
        version=output.version,
        recipe=RECIPES[recipe],
        profile=profile,
        created_at=datetime.now(UTC),
        code_version=code_version(),
        lake=str(lake.path),
        output=TablePin(ref=output.ref, content_hash=output.content_hash, rows=output.rows),
        inputs=[TablePin(ref=inputs.ref, content_hash=inputs.content_hash, rows=inputs.rows)],
        drops=drops_pin,
        sources=[SourceFile(path=p, rows=n) for p, n in report.rows_by_path.items()],
        benchmarks=build.benchmarks,
        params=_jsonable(params),
        funnel=funnel,
    )
    path = Path(manifests_dir) / "datasets" / recipe / f"v{output.version}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(manifest.model_dump_json(indent=2) + "\n")
    os.replace(tmp, path)
    return BuildReport(manifest=manifest, manifest_path=path)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))
