"""The toy world end to end: tiny weak and strong models of our own answer real prompts, and
the recipes' pass rates, difficulty drops and SFT responses come from what they generated."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from builders import math_rl_v2, math_sft
from builders.runner import build_dataset
from curation.difficulty import measure_pass_rates
from curation.generate.samples import Sampler
from lake.catalog import Lake

pytestmark = pytest.mark.slow


def test_toy_world_builds_math_sft_and_math_rl_with_real_pass_rates(tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake")
    sft = build_dataset(lake, math_sft, profile="toy", manifests_dir=tmp_path / "m")
    rl = build_dataset(
        lake,
        math_rl_v2,
        profile="toy",
        overrides={"sft_datasets": ["math_sft"]},
        manifests_dir=tmp_path / "m",
    )
    funnels = {
        name: [(f.step, f.rows_in, f.rows_out, f.dropped) for f in report.manifest.funnel]
        for name, report in (("math_sft", sft), ("math_rl_v2", rl))
    }
    print(json.dumps(funnels, indent=1))

    # SFT rows are the strong model's verified responses: every kept answer is right.
    rows = pl.from_arrow(lake.read("math_sft"))
    assert rows.height > 0 and set(rows["mode"]) == {"think"}
    assert all(str(a) in r for a, r in zip(rows["answer"], rows["response"], strict=True))

    # The weak model's measured pass rates, and the strong model's on the same prompts.
    sources = pl.from_arrow(lake.read("math_rl_v2_sources"))
    toy = math_rl_v2.toy_profile(lake.path / "work" / "math_rl_v2")[1]
    strong = measure_pass_rates(
        sources,
        lake=lake,
        label="strong",
        sampler=Sampler.from_params(
            toy["weak"]
            | {
                "model": toy["teacher"]["model"],
                "backend_options": toy["teacher"]["backend_options"],
            }
        ),
    ).kept
    weak = pl.from_arrow(
        lake.sql(
            "SELECT prompt_id, pass_rate FROM difficulty WHERE model LIKE '%weak%'"
        ).to_arrow_table()
    )
    assert weak.height > 0
    mean_weak, mean_strong = weak["pass_rate"].mean(), strong["strong_pass_rate"].mean()
    print(f"mean pass rate: weak {mean_weak:.3f}, strong {mean_strong:.3f}")
    assert mean_strong > mean_weak + 0.1

    # The filter's drops agree with a direct count over the measurements.
    reached = next(f for f in rl.manifest.funnel if f.step == "too_easy").rows_in
    too_easy = lake.sql(
        "SELECT count(*) FROM drops WHERE output_table = 'math_rl_v2' AND reason = 'too_easy'"
    ).fetchall()[0][0]
    survivors = (
        lake.sql(
            "SELECT count(*) FROM drops WHERE output_table = 'math_rl_v2' AND step IN "
            "('too_easy', 'disjoint_from_sft')"
        ).fetchall()[0][0]
        + lake.resolve("math_rl_v2").rows
    )
    assert survivors == reached
    measured = pl.from_arrow(lake.read("math_rl_v2")).get_column("weak_pass_rate")
    assert (measured < 0.75).all()
    dropped_rates = [
        json.loads(d)["decided_pass_rate"]
        for (d,) in lake.sql(
            "SELECT detail FROM drops WHERE output_table = 'math_rl_v2' AND reason = 'too_easy'"
        ).fetchall()
    ]
    assert len(dropped_rates) == too_easy and all(r >= 0.75 for r in dropped_rates)
