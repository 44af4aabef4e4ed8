"""The report's charts as plotly figures, and their HTML without the library (inlined once).

Histograms are binned in SQL before they get here (pass rates to two decimals, token counts
into at most ~50 bins), so a chart's size does not grow with the table it describes.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from schemas.dataset_manifest import FunnelStep

_LAYOUT = {
    "template": "plotly_white",
    "height": 340,
    "margin": {"l": 60, "r": 20, "t": 40, "b": 50},
    "font": {"size": 12},
}
_CONFIG = {"displaylogo": False, "responsive": True}


def plotly_library() -> str:
    """plotly.js itself, to inline once per page (the report opens offline)."""
    return get_plotlyjs()


def chart_html(figure: go.Figure, div_id: str) -> str:
    """A figure's div and the script that draws it; the page must have loaded plotly.js."""
    return pio.to_html(
        figure, include_plotlyjs=False, full_html=False, div_id=div_id, config=_CONFIG
    )


def funnel_figure(input_rows: int, funnel: Sequence[FunnelStep]) -> go.Figure:
    """Rows left after each step, from the rows read at the start."""
    stages = ["input", *(f"{f.step} (skipped)" if f.skipped else f.step for f in funnel)]
    rows = [input_rows, *(f.rows_out for f in funnel)]
    figure = go.Figure(
        go.Funnel(y=stages, x=rows, textinfo="value+percent initial", marker={"color": "#4c78a8"})
    )
    figure.update_layout(title="Rows kept after each step", **_LAYOUT)
    return figure


def drops_figure(drops: Sequence[tuple[str, str, int]], steps: Sequence[str]) -> go.Figure:
    """Dropped rows per step, stacked by reason."""
    figure = go.Figure()
    for reason in sorted({r for _, r, _ in drops}):
        counts = {s: n for s, r, n in drops if r == reason}
        figure.add_trace(go.Bar(name=reason, x=list(steps), y=[counts.get(s, 0) for s in steps]))
    figure.update_layout(title="Dropped rows by step and reason", barmode="stack", **_LAYOUT)
    figure.update_yaxes(title="rows")
    return figure


def contamination_figure(benchmarks: Sequence[tuple[str, int, int]]) -> go.Figure:
    """Per benchmark: rows dropped as contaminated, and how many of its items they matched."""
    names = [b for b, _, _ in benchmarks]
    figure = go.Figure(
        [
            go.Bar(name="rows dropped", x=names, y=[r for _, r, _ in benchmarks]),
            go.Bar(name="benchmark items matched", x=names, y=[i for _, _, i in benchmarks]),
        ]
    )
    figure.update_layout(title="Contamination by benchmark", barmode="group", **_LAYOUT)
    return figure


def clusters_figure(clusters: dict[str, dict[int, int]]) -> go.Figure:
    """How many duplicate clusters there are of each size (the kept row counted), per step."""
    figure = go.Figure()
    for step, sizes in clusters.items():
        ordered = sorted(sizes.items())
        figure.add_trace(go.Bar(name=step, x=[s for s, _ in ordered], y=[n for _, n in ordered]))
    figure.update_layout(title="Duplicate cluster sizes", barmode="group", **_LAYOUT)
    figure.update_xaxes(title="rows in the cluster", dtick=1)
    figure.update_yaxes(title="clusters")
    return figure


def histogram_figure(
    bins: Sequence[tuple[str, float, int]], title: str, x_title: str, width: float | None = None
) -> go.Figure:
    """Binned counts per model as overlaid bars: (model, bin start, count) rows."""
    figure = go.Figure()
    for model in sorted({m for m, _, _ in bins}):
        points = sorted((x, n) for m, x, n in bins if m == model)
        figure.add_trace(
            go.Bar(
                name=model,
                x=[x for x, _ in points],
                y=[n for _, n in points],
                width=width,
                offset=0 if width else None,
                opacity=0.7,
            )
        )
    figure.update_layout(title=title, barmode="overlay", bargap=0.05, **_LAYOUT)
    figure.update_xaxes(title=x_title)
    figure.update_yaxes(title="prompts" if "pass" in title else "count")
    return figure
