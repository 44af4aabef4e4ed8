"""The build report: one self-contained HTML page that shows what a build kept, dropped and why.

`write_report(lake, "math_rl_v2@3")` reads the version, its drops and its dataset manifest
and writes a page that opens offline (plotly.js is inlined): the funnel, drops by step and
reason, contamination per benchmark with its most frequent matched n-grams, duplicate
cluster sizes, pass-rate and response-length histograms where the lake holds a difficulty
or generations table for the dataset's prompts, the sources, benchmarks and parameters with
their hashes, and a sample browser of kept rows and dropped rows with their evidence.
Everything is aggregated or sampled in SQL, so a page stays a few MB for any table size.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import jinja2
from markupsafe import Markup

from builders.publish import charts
from builders.publish.evidence import (
    BenchmarkItems,
    RowSample,
    answer_of,
    evidence_for,
    parse_detail,
    short_fields,
    text_of,
)
from builders.publish.manifest_file import ManifestFile, find_manifest, manifest_path
from builders.publish.math_markup import render_math
from lake import Lake, VersionInfo
from schemas.dataset_manifest import DatasetManifest, FunnelStep

if TYPE_CHECKING:
    from curation.evaluate.run import TrainedScore

KEPT_SAMPLES = 40
DROPPED_SAMPLES = 12  # per (step, reason)
TOP_NGRAMS = 10
DIFFICULTY_COLUMNS = {"prompt_id", "model", "pass_rate"}
GENERATION_COLUMNS = {"prompt_id", "model", "completion_tokens"}
LENGTH_BINS = 50


@dataclass
class DropGroup:
    """The dropped rows of one (step, reason): how many, and a sample with evidence."""

    step: str
    reason: str
    total: int
    samples: list[RowSample] = field(default_factory=list)


@dataclass
class BenchmarkHits:
    name: str
    rows: int
    items: int
    top_ngrams: list[tuple[str, int]]


@dataclass
class ReportData:
    """Everything the page shows, gathered from the lake and the manifest."""

    info: VersionInfo
    manifest: ManifestFile | None
    funnel: list[FunnelStep]
    funnel_note: str
    input_rows: int
    drops_by_reason: list[tuple[str, str, int]]
    contamination: list[BenchmarkHits]
    clusters: dict[str, dict[int, int]]
    pass_rates: list[tuple[str, float, int]]
    lengths: list[tuple[str, float, int]]
    length_width: float | None
    length_label: str
    measured_from: list[str]
    kept: list[RowSample]
    dropped: list[DropGroup]
    benchmark_notes: dict[str, str]
    evaluations: list[TrainedScore] = field(default_factory=list)

    @property
    def dropped_total(self) -> int:
        return sum(n for _, _, n in self.drops_by_reason)


# -- gathering --------------------------------------------------------------------------------


def gather_report(
    lake: Lake,
    ref: str,
    manifest: DatasetManifest | str | os.PathLike[str] | None = None,
    *,
    search: Sequence[str | os.PathLike[str]] = (),
    kept_samples: int = KEPT_SAMPLES,
    dropped_samples: int = DROPPED_SAMPLES,
) -> ReportData:
    """Read what the report shows about `ref` (name or name@N) from the lake and manifest."""
    from curation.evaluate.run import scores_of_models_trained_on  # the verifiers: when used

    info = lake.resolve(ref)
    found = find_manifest(lake, info, manifest, search)
    pins = _build_pins(info, found)
    mentioned = {info.ref, *info.parents, *(f"{t}@{v}" for t, v in pins)}
    con = lake.connect(" ".join(f'"{p}"' for p in sorted(mentioned)))
    try:
        _create_build_drops(con, pins, found)
        drops_by_reason = [
            (s, r, int(n))
            for s, r, n in con.execute(
                "SELECT step, reason, count(*) FROM build_drops GROUP BY ALL ORDER BY 3 DESC, 1, 2"
            ).fetchall()
        ]
        funnel, input_rows, note = _funnel(lake, info, found, con)
        benchmarks = (
            BenchmarkItems.from_manifest(found.manifest.benchmarks) if found else BenchmarkItems()
        )
        pass_rates, lengths, width, label, measured = _measurements(lake, info, con)
        return ReportData(
            info=info,
            manifest=found,
            funnel=funnel,
            funnel_note=note,
            input_rows=input_rows,
            drops_by_reason=drops_by_reason,
            contamination=_contamination(con),
            clusters=_clusters(con),
            pass_rates=pass_rates,
            lengths=lengths,
            length_width=width,
            length_label=label,
            measured_from=measured,
            kept=_kept_sample(con, info, kept_samples),
            dropped=_dropped_sample(con, drops_by_reason, funnel, dropped_samples, benchmarks),
            benchmark_notes=benchmarks.problems,
            evaluations=scores_of_models_trained_on(lake, info.ref),
        )
    finally:
        con.close()


def _build_pins(info: VersionInfo, found: ManifestFile | None) -> list[tuple[str, int]]:
    """Table versions whose drops belong to this build: the output, and the versions the
    build ingested (its read errors) when the manifest's funnel has their steps."""
    pins = [(info.name, info.version)]
    if found is not None:
        for pin in found.manifest.inputs:
            name, _, version = pin.ref.partition("@")
            pins.append((name, int(version)))
    return pins


def _create_build_drops(
    con: duckdb.DuckDBPyConnection, pins: list[tuple[str, int]], found: ManifestFile | None
) -> None:
    where = " OR ".join("(output_table = ? AND output_version = ?)" for _ in pins)
    params: list[Any] = [x for pin in pins for x in pin]
    own = "output_table = ? AND output_version = ?"
    steps = [f.step for f in found.manifest.funnel] if found else []
    con.execute(
        "CREATE TEMP TABLE build_drops AS SELECT *, "
        "CASE WHEN json_valid(detail) THEN detail::JSON END AS d FROM drops "
        f"WHERE ({where}) AND (({own}) OR list_contains(?::VARCHAR[], step))",
        [*params, *pins[0], steps],
    )


def _funnel(
    lake: Lake, info: VersionInfo, found: ManifestFile | None, con: duckdb.DuckDBPyConnection
) -> tuple[list[FunnelStep], int, str]:
    if found is not None and found.manifest.funnel:
        funnel = list(found.manifest.funnel)
        return funnel, funnel[0].rows_in, ""
    # No manifest: steps in the order their drops were written, counts from drops.
    rows = con.execute(
        "SELECT step, reason, count(*), min(rowid) FROM build_drops GROUP BY ALL ORDER BY 4"
    ).fetchall()
    order: list[str] = []
    by_step: dict[str, dict[str, int]] = {}
    for step, reason, n, _ in rows:
        if step not in by_step:
            order.append(step)
            by_step[step] = {}
        by_step[step][reason] = int(n)
    parents = [lake.resolve(p) for p in info.parents if "@" in p]
    total_dropped = sum(sum(v.values()) for v in by_step.values())
    rows_in = parents[0].rows if len(parents) == 1 else info.rows + total_dropped
    funnel = []
    current = rows_in
    for step in order:
        dropped = sum(by_step[step].values())
        funnel.append(
            FunnelStep(
                step=step, rows_in=current, rows_out=current - dropped, dropped=by_step[step]
            )
        )
        current -= dropped
    note = (
        "No dataset manifest was found for this version, so the funnel is rebuilt from the "
        "drops table: steps that dropped nothing are not shown."
    )
    return funnel, rows_in, note


def _contamination(con: duckdb.DuckDBPyConnection) -> list[BenchmarkHits]:
    totals = con.execute(
        "SELECT d->>'benchmark' AS b, count(*), count(DISTINCT d->>'benchmark_id') "
        "FROM build_drops WHERE d->>'benchmark' IS NOT NULL GROUP BY 1 ORDER BY 2 DESC, 1"
    ).fetchall()
    top = con.execute(
        "SELECT b, g, n FROM (SELECT d->>'benchmark' AS b, d->>'ngram' AS g, count(*) AS n, "
        "row_number() OVER (PARTITION BY d->>'benchmark' ORDER BY count(*) DESC, d->>'ngram') "
        "AS k FROM build_drops WHERE d->>'ngram' IS NOT NULL GROUP BY 1, 2) WHERE k <= ? "
        "ORDER BY b, n DESC, g",
        [TOP_NGRAMS],
    ).fetchall()
    return [
        BenchmarkHits(b, int(rows), int(items), [(g, int(n)) for bb, g, n in top if bb == b])
        for b, rows, items in totals
    ]


def _clusters(con: duckdb.DuckDBPyConnection) -> dict[str, dict[int, int]]:
    rows = con.execute(
        "SELECT step, size, count(*) FROM (SELECT step, d->>'cluster_id', "
        "coalesce(max(TRY_CAST(d->>'cluster_size' AS BIGINT)), count(*) + 1) AS size "
        "FROM build_drops WHERE d->>'cluster_id' IS NOT NULL GROUP BY 1, 2) "
        "GROUP BY 1, 2 ORDER BY 1, 2"
    ).fetchall()
    clusters: dict[str, dict[int, int]] = {}
    for step, size, n in rows:
        clusters.setdefault(step, {})[int(size)] = int(n)
    return clusters


def _columns(info: VersionInfo) -> set[str]:
    """Top-level column names of a version, from its recorded Arrow schema text."""
    return {
        line.split(":", 1)[0]
        for line in info.schema.splitlines()
        if line and not line[0].isspace() and ":" in line
    }


def _measurements(
    lake: Lake, info: VersionInfo, con: duckdb.DuckDBPyConnection
) -> tuple[list, list, float | None, str, list[str]]:
    """Pass-rate and response-length bins from difficulty / generations tables that hold
    rows for this dataset's prompts (matched by uid or id)."""
    keys = [c for c in ("uid", "id") if c in _columns(info)]
    if not keys:
        return [], [], None, "", []
    prompt_keys = " UNION ".join(f'SELECT CAST("{k}" AS VARCHAR) FROM "{info.ref}"' for k in keys)
    pass_rates: list[tuple[str, float, int]] = []
    lengths: list[tuple[str, float, int]] = []
    width: float | None = None
    label = ""
    measured: list[str] = []
    for table in lake.tables():
        if table.name in (info.name, "drops"):
            continue
        columns = _columns(table)
        is_difficulty = columns >= DIFFICULTY_COLUMNS
        is_generations = table.kind == "generations" or columns >= GENERATION_COLUMNS
        if not (is_difficulty or is_generations):
            continue
        con.execute(
            f'CREATE OR REPLACE TEMP TABLE measured AS SELECT * FROM "{table.name}" '
            f"WHERE CAST(prompt_id AS VARCHAR) IN ({prompt_keys})"
        )
        if not con.execute("SELECT count(*) FROM measured").fetchone()[0]:
            continue
        measured.append(table.ref)
        if is_difficulty and not pass_rates:
            pass_rates = [
                (str(m), float(x), int(n))
                for m, x, n in con.execute(
                    "SELECT model, round(pass_rate, 2), count(*) FROM measured "
                    "WHERE pass_rate IS NOT NULL GROUP BY ALL"
                ).fetchall()
            ]
        tokens = "completion_tokens" if is_generations else "mean_tokens"
        if tokens in columns and (not lengths or is_generations):
            top = con.execute(f"SELECT max({tokens}) FROM measured").fetchone()[0] or 0
            width = max(1.0, float(-(-float(top) // LENGTH_BINS)))
            lengths = [
                (str(m), float(x), int(n))
                for m, x, n in con.execute(
                    f"SELECT model, floor({tokens} / ?) * ?, count(*) FROM measured "
                    f"WHERE {tokens} IS NOT NULL GROUP BY ALL",
                    [width, width],
                ).fetchall()
            ]
            label = (
                "response tokens per sample"
                if is_generations
                else "mean response tokens per prompt"
            )
    return pass_rates, lengths, width, label, measured


def _key(columns: Sequence[str]) -> str | None:
    return next((c for c in ("uid", "id") if c in columns), None)


def _kept_sample(con: duckdb.DuckDBPyConnection, info: VersionInfo, limit: int) -> list[RowSample]:
    rel = con.sql(f'SELECT * FROM "{info.ref}" LIMIT 0')
    key = _key(rel.columns)
    order = f'ORDER BY hash("{key}")' if key else ""
    rows = con.execute(f'SELECT * FROM "{info.ref}" {order} LIMIT ?', [limit]).fetchall()
    return [_sample(dict(zip(rel.columns, r, strict=True)), key) for r in rows]


def _sample(row: dict[str, Any], key: str | None) -> RowSample:
    text, answer = text_of(row), answer_of(row)
    skip = [c for c in row if row[c] is not None and str(row[c]) in (text, answer)]
    return RowSample(
        key=str(row[key]) if key else "",
        text=text,
        answer=answer,
        fields=short_fields(row, skip=[*skip, *([key] if key else [])]),
    )


def _rows_by_key(
    con: duckdb.DuckDBPyConnection, table: str, version: int, keys: set[str]
) -> dict[str, dict[str, Any]]:
    ref = f"{table}@{version}"
    rel = con.sql(f'SELECT * FROM "{ref}" LIMIT 0')
    key = _key(rel.columns)
    if key is None or not keys:
        return {}
    rows = con.execute(
        f'SELECT * FROM "{ref}" WHERE CAST("{key}" AS VARCHAR) IN (SELECT unnest(?::VARCHAR[]))',
        [sorted(keys)],
    ).fetchall()
    return {str(r[rel.columns.index(key)]): dict(zip(rel.columns, r, strict=True)) for r in rows}


def _dropped_sample(
    con: duckdb.DuckDBPyConnection,
    drops_by_reason: list[tuple[str, str, int]],
    funnel: list[FunnelStep],
    limit: int,
    benchmarks: BenchmarkItems,
) -> list[DropGroup]:
    picked = con.execute(
        "SELECT input_table, input_version, uid, step, reason, detail, output_table, "
        "output_version FROM (SELECT *, row_number() OVER (PARTITION BY step, reason "
        "ORDER BY hash(uid)) AS k FROM build_drops) WHERE k <= ? ORDER BY step, reason, uid",
        [limit],
    ).fetchall()
    return drop_samples(con, picked, drops_by_reason, [f.step for f in funnel], benchmarks)


def drop_samples(
    con: duckdb.DuckDBPyConnection,
    picked: list[tuple],
    totals: list[tuple[str, str, int]],
    step_order: Sequence[str],
    benchmarks: BenchmarkItems,
) -> list[DropGroup]:
    """Dropped rows (input_table, input_version, uid, step, reason, detail, output_table,
    output_version tuples) with their input rows and evidence, grouped by (step, reason).

    The connection must have views of the input versions the drops name.
    """
    wanted: dict[tuple[str, int], set[str]] = {}
    details = []
    for table, version, uid, _, _, raw, _, _ in picked:
        detail = parse_detail(raw)
        details.append(detail)
        if table is not None:
            keys = wanted.setdefault((table, int(version)), set())
            keys.add(str(uid))
            if "duplicate_of" in detail:
                keys.add(str(detail["duplicate_of"]))
    rows = {pin: _rows_by_key(con, *pin, keys) for pin, keys in wanted.items()}
    groups: dict[tuple[str, str], DropGroup] = {(s, r): DropGroup(s, r, n) for s, r, n in totals}
    for (table, version, uid, step, reason, _, out_table, out_version), detail in zip(
        picked, details, strict=True
    ):
        found = rows.get((table, int(version)), {}) if table is not None else {}
        row = found.get(str(uid))
        twin = found.get(str(detail.get("duplicate_of"))) if "duplicate_of" in detail else None
        sample = _sample(row, _key(list(row))) if row else RowSample(str(uid), "", None, {})
        sample.key = str(uid)
        sample.step, sample.reason, sample.detail = step, reason, detail
        sample.output = f"{out_table}@{out_version}"
        sample.evidence = evidence_for(row, detail, reason, twin=twin, benchmarks=benchmarks)
        groups.setdefault((step, reason), DropGroup(step, reason, 0)).samples.append(sample)
    rank = {s: i for i, s in enumerate(step_order)}
    return sorted(groups.values(), key=lambda g: (rank.get(g.step, len(rank)), -g.total, g.reason))


# -- rendering --------------------------------------------------------------------------------


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["num"] = lambda v: f"{v:,}" if isinstance(v, int) else v
    env.filters["pretty"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False, default=str)
    env.filters["utc"] = lambda t: t.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    env.filters["math"] = render_math
    return env


def template(name: str) -> jinja2.Template:
    """A template of this package (the server renders its pages' evidence with them too)."""
    return environment().get_template(name)


def report_charts(data: ReportData) -> dict[str, Markup]:
    """The page's charts by name (absent when there is nothing to draw)."""
    steps = [f.step for f in data.funnel]
    out = {"funnel": charts.funnel_figure(data.input_rows, data.funnel)} if data.funnel else {}
    if data.drops_by_reason:
        extra = [s for s, _, _ in data.drops_by_reason if s not in steps]
        out["drops"] = charts.drops_figure(data.drops_by_reason, [*steps, *dict.fromkeys(extra)])
    if data.contamination:
        out["contamination"] = charts.contamination_figure(
            [(b.name, b.rows, b.items) for b in data.contamination]
        )
    if data.clusters:
        out["clusters"] = charts.clusters_figure(data.clusters)
    if data.pass_rates:
        out["pass_rates"] = charts.histogram_figure(
            data.pass_rates, "Pass rate per prompt, by model", "pass rate"
        )
    if data.lengths:
        out["lengths"] = charts.histogram_figure(
            data.lengths, "Response length, by model", data.length_label, data.length_width
        )
    return {name: Markup(charts.chart_html(fig, f"chart-{name}")) for name, fig in out.items()}


def render_report(data: ReportData) -> str:
    """The report page as one HTML document (plotly.js inlined)."""
    return template("report.html.j2").render(
        data=data,
        m=data.manifest.manifest if data.manifest else None,
        charts=report_charts(data),
        plotly_js=Markup(charts.plotly_library()),
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    )


def write_report(
    lake: Lake,
    ref: str,
    out: str | os.PathLike[str] | None = None,
    manifest: DatasetManifest | str | os.PathLike[str] | None = None,
    *,
    search: Sequence[str | os.PathLike[str]] = (),
) -> Path:
    """Write the report of `ref` and return its path.

    `out` defaults to the manifest's path with `.html` (next to `manifests/datasets/<name>/
    v<N>.json`), or `<name>-v<N>.html` here when the version has no manifest on disk.
    """
    data = gather_report(lake, ref, manifest, search=search)
    if out is None:
        if data.manifest is not None and data.manifest.path is not None:
            out = data.manifest.path.with_suffix(".html")
        else:
            out = Path(f"{data.info.name}-v{data.info.version}.html")
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render_report(data), encoding="utf-8")
    os.replace(tmp, path)
    return path


def default_report_path(directory: str | os.PathLike[str], name: str, version: int) -> Path:
    """Where a build's report goes: next to its manifest."""
    return manifest_path(directory, name, version).with_suffix(".html")
