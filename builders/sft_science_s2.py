"""sft_science_s2: science SFT responses for stage 2 (32K), from the newer thinking teacher.

Following the Cascade recipe (Science S2: the same 226K-prompt pool as stage 1, DeepSeek-R1-0528,
345K samples, upsampled x2 in the stage-2 mix): the stage-1 recipe with the newer teacher and
the 32K limit (see `sft_science_s1` for the steps and the sources).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builders import sft_science_s1
from builders.runner import Build
from lake.steps import Step

NAME = "sft_science_s2"
DOMAIN = "science"
OUTPUT_KIND = "generic"
DEFAULTS: dict[str, Any] = {
    **sft_science_s1.DEFAULTS,
    "teacher": {
        **sft_science_s1.DEFAULTS["teacher"],
        "model": "deepseek-ai/DeepSeek-R1-0528",
        "max_new_tokens": 32768,
    },
    "max_response_tokens": 32768,
}


def steps(params: dict[str, Any], build: Build) -> list[Step]:
    """The stage-1 recipe, with the stage-2 teacher and limit."""
    return sft_science_s1.steps(params, build)


def toy_profile(workdir: Path) -> tuple[list[str], dict[str, Any]]:
    """The stage-1 toy profile (the toy world has one strong model)."""
    return sft_science_s1.toy_profile(workdir)


PROFILES = {"toy": toy_profile}
