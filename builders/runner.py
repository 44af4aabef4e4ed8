"""The runner behind `cascade build dataset NAME`: ingest, run a recipe's steps, publish.

A recipe is a module with `NAME`, `DOMAIN`, `DEFAULTS` (its named parameters) and
`steps(params, build) -> list[Step]`; `builders.recipes` lists them. The runner ingests the
sources into a `<name>_sources` table (files, or lake tables), hands the recipe's steps to
`lake.run_steps` (which commits the new version of `<name>` together with its drops), and
writes `manifests/datasets/<name>/v<N>.json`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from builders.publish.report import write_report
from curation.decontaminate.benchmarks import Benchmark, load_benchmarks
from curation.ingest import ingest
from lake.catalog import Lake
from lake.provenance import code_version
from lake.steps import Executor, Step, run_steps
from schemas.dataset_manifest import (
    BenchmarkUsed,
    DatasetManifest,
    FunnelStep,
    SourceFile,
    TablePin,
)


class BuildError(ValueError):
    """A build cannot start or a step failed; the message says which and why."""


@dataclass
class Build:
    """What a recipe's steps may need besides the table: the lake, and what they used.

    `dry_run` asks the recipe for its step list only (`cascade build show`): nothing may be
    loaded or computed, and the lake may be None.
    """

    lake: Lake | None
    profile: str
    workdir: Path
    benchmarks: list[BenchmarkUsed] = field(default_factory=list)
    dry_run: bool = False

    def load_benchmarks(self, names: list[str], benchmark_dir: str = "") -> list:
        """The benchmark sets a step decontaminates against, recorded for the manifest.

        Names are looked up in `benchmark_dir` first (a missing directory is an error, not
        an unknown benchmark), then in the registry; files and directories work too.
        """
        if self.dry_run:
            return list(names)
        if benchmark_dir and not Path(benchmark_dir).is_dir():
            raise BuildError(f"benchmark_dir {benchmark_dir}: no such directory")
        try:
            loaded = load_benchmarks(names, local_dir=benchmark_dir or None)
        except (FileNotFoundError, KeyError, ValueError) as exc:
            raise BuildError(f"cannot load benchmarks {names}: {exc}") from None
        self.record_benchmarks(loaded)
        return loaded

    def record_benchmarks(self, loaded: Sequence[Benchmark], kind: str = "texts") -> None:
        """Record benchmark sets a step compares rows with, for the manifest: every set a
        recipe loads itself (code tests, URL lists) goes through here too."""
        self.benchmarks += [
            BenchmarkUsed(
                name=b.name,
                items=len(b.ids),
                content_hash=b.content_hash,
                origin=b.origin,
                kind=kind,  # type: ignore[arg-type]
            )
            for b in loaded
        ]


@dataclass
class BuildReport:
    """What a build published: its manifest, and the HTML report written next to it."""

    manifest: DatasetManifest
    manifest_path: Path
    report_path: Path | None = None
    report_error: str | None = None


def parse_overrides(pairs: list[str], defaults: dict[str, Any]) -> dict[str, Any]:
    """Parse `key=value` overrides, typed like the recipe's default for that key.

    A dict parameter (a model's settings) takes `key.field=value` for one field, a JSON
    object for all of it, or `none` to turn the step that uses it off.
    """
    params: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep:
            raise BuildError(f"bad --set {pair!r}: expected key=value")
        name, dot, sub = key.partition(".")
        if name not in defaults:
            raise BuildError(
                f"unknown parameter {name!r}; parameters: {', '.join(sorted(defaults))}"
            )
        default = defaults[name]
        if dot:
            base = params.get(name, default)
            if not isinstance(base, dict):
                raise BuildError(f"bad --set {key}: {name!r} has no fields")
            params[name] = {**base, sub: _typed(key, raw, base.get(sub, _json_or_text(raw)))}
        else:
            params[name] = _typed(key, raw, default)
    return params


def _json_or_text(raw: str) -> Any:
    """A field with no default: JSON when it parses (objects, numbers, true), else text."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _typed(key: str, raw: str, default: Any) -> Any:
    try:
        if isinstance(default, bool):
            if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(raw)
            return raw.lower() in ("true", "1", "yes")
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
        if isinstance(default, list):
            return [v.strip() for v in raw.split(",") if v.strip()]
        if not isinstance(default, str | dict) and default is not None:
            return json.loads(raw)
        if isinstance(default, dict) or default is None:
            if raw.lower() in ("none", "null", "off"):
                return None
            value = json.loads(raw) if raw.lstrip().startswith("{") else raw
            if isinstance(default, dict) and not isinstance(value, dict):
                raise ValueError(raw)
            return value
        return raw
    except ValueError:
        raise BuildError(f"bad --set {key}={raw!r}: expected a {type(default).__name__}") from None


def recipe_steps(recipe: ModuleType, overrides: dict[str, Any] | None = None) -> list[Step]:
    """A recipe's steps with its default parameters, without loading or running anything."""
    params = {**recipe.DEFAULTS, **(overrides or {})}
    return recipe.steps(
        params, Build(lake=None, profile="default", workdir=Path("."), dry_run=True)
    )


def build_dataset(
    lake: Lake,
    recipe: ModuleType,
    *,
    sources: list[str] | None = None,
    overrides: dict[str, Any] | None = None,
    mapping: dict[str, str] | None = None,
    profile: str = "default",
    manifests_dir: str | os.PathLike[str] | None = None,
    on_step: Callable[[FunnelStep], None] | None = None,
    executor: Executor | None = None,
    out: str | None = None,
    write_html_report: bool = True,
) -> BuildReport:
    """Build a new version of a recipe's dataset (table `out`, default the recipe's name)
    and write its manifest (under `manifests_dir`, default the lake's `manifests/`)."""
    name = out or recipe.NAME
    params = {**recipe.DEFAULTS, **(overrides or {})}
    workdir = lake.path / "work" / recipe.NAME
    workdir.mkdir(parents=True, exist_ok=True)
    build = Build(lake=lake, profile=profile, workdir=workdir)
    profiles = getattr(recipe, "PROFILES", {})
    if profile in profiles:
        sources, profile_params = profiles[profile](workdir)
        params = {**params, **profile_params, **(overrides or {})}
    elif profile != "default":
        known = ", ".join(["default", *profiles])
        raise BuildError(f"recipe {recipe.NAME} has no profile {profile!r}; profiles: {known}")
    if not sources:
        raise BuildError(
            f"recipe {recipe.NAME} needs at least one --source (a file or a lake table)"
            + (f", or --profile {next(iter(profiles))}" if profiles else "")
        )

    steps = recipe.steps(params, build)  # resolves benchmarks etc. before any long work
    report = ingest(
        lake,
        list(sources),
        f"{name}_sources",
        domain=recipe.DOMAIN,
        mapping=mapping or params.get("mapping") or {},
        on_error=params.get("on_error", "raise"),
    )
    inputs = report.version
    run = run_steps(
        lake,
        inputs.ref,
        steps,
        out=name,
        kind=getattr(recipe, "OUTPUT_KIND", "prompts"),
        producer=f"cascade build dataset {recipe.NAME}",
        params={"profile": profile, **_jsonable(params)},
        on_step=on_step,
        executor=executor,
    )
    output = run.output
    ingest_funnel = report.run.funnel if report.run else []
    manifest = DatasetManifest(
        name=name,
        version=output.version,
        recipe=recipe.__name__,
        profile=profile,
        created_at=datetime.now(UTC),
        code_version=code_version(),
        lake=str(lake.path),
        build_id=run.build_id,
        output=TablePin(ref=output.ref, content_hash=output.content_hash, rows=output.rows),
        inputs=[TablePin(ref=inputs.ref, content_hash=inputs.content_hash, rows=inputs.rows)],
        drops=(
            TablePin(ref=run.drops.ref, content_hash=run.drops.content_hash, rows=run.drops.rows)
            if run.drops
            else None
        ),
        sources=[
            SourceFile(
                path=p,
                rows=n,
                version=report.pins[p].version,
                content_hash=report.pins[p].content_hash,
            )
            for p, n in report.rows_by_path.items()
        ],
        benchmarks=build.benchmarks,
        params=_jsonable(params),
        funnel=[*(f for f in ingest_funnel if f.dropped), *run.funnel],
    )
    where = Path(manifests_dir) if manifests_dir is not None else lake.path / "manifests"
    path = where / "datasets" / name / f"v{output.version}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(manifest.model_dump_json(indent=2) + "\n")
    os.replace(tmp, path)
    result = BuildReport(manifest=manifest, manifest_path=path)
    if write_html_report:
        # The version is committed: a report that cannot be drawn is a warning, not a failure.
        try:
            result.report_path = write_report(lake, output.ref, manifest=path)
        except Exception as exc:  # noqa: BLE001 - say what failed; `cascade report` retries it
            result.report_error = f"{type(exc).__name__}: {exc}"
    return result


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))
