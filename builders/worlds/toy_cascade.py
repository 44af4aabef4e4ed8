"""Build every dataset of `manifests/toy_cascade.json` into a toy lake, by the recipes.

Each build is `cascade build dataset RECIPE --profile PROFILE [--set ...] [--out NAME]`; they
run here in one process (the same `builders.runner.build_dataset` the command calls, without
importing torch two dozen times) and each prints the command it stands for and its funnel
line. The order follows the data: SFT sets first (the RL sets are kept disjoint from them),
preference pairs before the RLHF prompts drawn from them, held-out sets next to the sets they
are held out from.

    python -m builders.worlds.toy_cascade --lake toy-lake
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from builders.recipes import recipe_named
from builders.runner import BuildReport, build_dataset, parse_overrides
from builders.worlds.toy_profile import TEACHER_STEPS_FILE
from lake.catalog import Lake


@dataclass(frozen=True)
class ToyBuild:
    """One `cascade build dataset` of the toy cascade."""

    recipe: str
    profile: str = "toy"
    out: str | None = None
    sets: tuple[str, ...] = field(default_factory=tuple)

    @property
    def table(self) -> str:
        return self.out or self.recipe

    def command(self) -> str:
        parts = ["cascade build dataset", self.recipe, f"--profile {self.profile}"]
        parts += [f"--set {s}" for s in self.sets]
        if self.out:
            parts.append(f"--out {self.out}")
        return " ".join(parts)


SFT_SETS = "sft_datasets=math_sft,math_sft_s2"
GENERAL_SFT = "sft_datasets=sft_general"
TOY_BUILDS: tuple[ToyBuild, ...] = (
    # SFT stage 1 and 2
    ToyBuild("sft_general"),
    ToyBuild("math_sft"),
    ToyBuild("math_sft_s2"),
    ToyBuild("code_sft"),
    ToyBuild("code_sft", out="code_sft_s2", sets=("seed=1", "k=6")),
    ToyBuild("swe_sft", out="swe_sft_repair", sets=("subtask=repair",)),
    ToyBuild("swe_sft", out="swe_sft_localization", sets=("subtask=localization",)),
    ToyBuild("swe_sft", out="swe_sft_test_generation", sets=("subtask=test_generation",)),
    # the reward model's pairs, and the RLHF prompts drawn from them
    ToyBuild("preference_pairs", out="helpsteer3_pairs"),
    ToyBuild("preference_pairs", "toy-helpsteer2", out="helpsteer2_pairs"),
    ToyBuild("rm_offtopic_pairs"),
    ToyBuild("rlhf_prompts"),
    ToyBuild("preference_pairs", "toy-heldout", out="helpsteer3_pairs_heldout"),
    ToyBuild("rlhf_prompts", "toy-heldout", out="rlhf_prompts_heldout"),
    # IF-RL, Math RL, Code RL, SWE RL (two prompt-length caps), each with a held-out set
    ToyBuild("if_rl", sets=(GENERAL_SFT,)),
    ToyBuild("if_rl", "toy-heldout", out="if_rl_heldout", sets=(GENERAL_SFT,)),
    ToyBuild("if_rl_ifbench", out="rl_if_ifbench", sets=(GENERAL_SFT,)),
    ToyBuild("if_rl_ifbench", "toy-heldout", out="rl_if_ifbench_heldout", sets=(GENERAL_SFT,)),
    ToyBuild("math_rl_v2", sets=(SFT_SETS,)),
    ToyBuild("math_rl_v2", "toy-heldout", out="math_rl_v2_heldout", sets=(SFT_SETS,)),
    ToyBuild("code_rl"),
    ToyBuild("code_rl", "toy-heldout", out="code_rl_heldout"),
    ToyBuild("swe_rl", out="swe_rl_short", sets=("max_prompt_tokens=450",)),
    ToyBuild("swe_rl"),
    ToyBuild("swe_rl", "toy-heldout", out="swe_rl_heldout"),
)


def build_toy_lake(
    lake_path: str | Path,
    builds: tuple[ToyBuild, ...] = TOY_BUILDS,
    say: Callable[[str], None] = print,
    teacher_steps: float = 1.0,
) -> dict[str, BuildReport]:
    """Run every build into the lake (made if missing); {table: report}. `teacher_steps`
    below 1 trains the toy teachers that much shorter (`TEACHER_STEPS_FILE`)."""
    lake = Lake(lake_path)
    if teacher_steps != 1.0:
        toy = lake.path / "work" / "toy"
        toy.mkdir(parents=True, exist_ok=True)
        (toy / TEACHER_STEPS_FILE).write_text(json.dumps({"scale": teacher_steps}))
    reports = {}
    for build in builds:
        start = time.perf_counter()
        recipe = recipe_named(build.recipe)
        report = build_dataset(
            lake,
            recipe,
            overrides=parse_overrides(list(build.sets), recipe.DEFAULTS),
            profile=build.profile,
            manifests_dir=Path(lake_path) / "manifests",
            out=build.out,
            write_html_report=False,
        )
        out = report.manifest.output
        say(
            f"{build.command()}: {out.ref} {out.rows} rows, content_hash "
            f"{out.content_hash[:12]} ({time.perf_counter() - start:.0f} s)"
        )
        reports[build.table] = report
    return reports


def main() -> None:
    parser = argparse.ArgumentParser(description="build the toy cascade's datasets")
    parser.add_argument("--lake", default="toy-lake")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="teachers train a quarter as long: a smoke run of every build, worse teachers",
    )
    args = parser.parse_args()
    build_toy_lake(args.lake, teacher_steps=0.25 if args.quick else 1.0)


if __name__ == "__main__":
    main()
