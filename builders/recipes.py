"""Every recipe `cascade build dataset` knows, by name, in the order the cascade uses them."""

from __future__ import annotations

from types import ModuleType

from builders import (
    code_rl,
    code_sft,
    if_rl,
    if_rl_ifbench,
    math_rl_v2,
    math_sft,
    math_sft_s2,
    preference_pairs,
    rlhf_prompts,
    rm_offtopic_pairs,
    sft_general,
    sft_science_s1,
    sft_science_s2,
    sft_tool_calling,
    swe_rl,
    swe_sft,
)
from builders.runner import BuildError

RECIPES: dict[str, ModuleType] = {
    module.NAME: module
    for module in (
        sft_general,
        math_sft,
        math_sft_s2,
        code_sft,
        sft_science_s1,
        sft_science_s2,
        sft_tool_calling,
        swe_sft,
        preference_pairs,
        rm_offtopic_pairs,
        rlhf_prompts,
        if_rl,
        if_rl_ifbench,
        math_rl_v2,
        code_rl,
        swe_rl,
    )
}


def build_command(table: str) -> str | None:
    """The `cascade build dataset` command of the recipe that builds table `table` (a recipe
    writes a table of its own name unless told `--out`), or None when no recipe is called so.

    >>> build_command("math_sft")
    'cascade build dataset math_sft --source <its sources>'
    >>> build_command("no_such_table") is None
    True
    """
    return f"cascade build dataset {table} --source <its sources>" if table in RECIPES else None


def recipe_named(name: str) -> ModuleType:
    """The recipe module called `name`, or BuildError listing the known recipes."""
    try:
        return RECIPES[name]
    except KeyError:
        raise BuildError(
            f"unknown recipe {name!r}; known recipes: {', '.join(sorted(RECIPES))}"
        ) from None
