"""`manifests/cascade_8b.json` names the datasets the recipes build, each with the `cascade build
dataset ...` command that produces it; a missing or mismatched table makes `cascade train` say
that command (or that no recipe builds it yet), and a placeholder hash is never accepted.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from builders.recipes import RECIPES, build_command, recipe_named
from builders.runner import parse_overrides
from cli.console import CascadeError
from lake.catalog import Lake
from schemas.training_manifest import DatasetRef
from training.datasets import DataHashError, verify
from training.runner import load_manifest

ROOT = Path(__file__).resolve().parents[1]
CASCADE_8B = ROOT / "manifests" / "cascade_8b.json"
UNBUILT: set[str] = set()
OPTION = re.compile(r"--(source|set|out) ([^\s<]*<[^>]*>|\S+)")


def all_refs() -> list[DatasetRef]:
    return [d for s in load_manifest(CASCADE_8B).stages for d in s.datasets]


def parse_build(command: str) -> tuple[str, dict[str, list[str]]]:
    """(recipe, {"source": [...], "set": [...], "out": [...]}) of a build command."""
    head = command.removeprefix("cascade build dataset ").split(" ", 1)
    options: dict[str, list[str]] = {"source": [], "set": [], "out": []}
    for kind, value in OPTION.findall(head[1] if len(head) > 1 else ""):
        options[kind].append(value)
    rest = OPTION.sub("", head[1] if len(head) > 1 else "").strip()
    assert not rest, f"unparsed part {rest!r} of {command!r}"
    return head[0], options


def test_every_build_command_is_a_recipe_whose_parameters_and_output_match() -> None:
    refs = all_refs()
    built = {d.ref.split("@")[0]: d.build for d in refs if d.build}
    assert {d.ref.split("@")[0] for d in refs if not d.build} == UNBUILT
    assert not UNBUILT & set(RECIPES)  # no recipe quietly builds one of them
    for table, command in built.items():
        recipe, options = parse_build(command)
        module = recipe_named(recipe)
        parse_overrides(options["set"], module.DEFAULTS)  # raises on an unknown parameter
        assert (options["out"] or [recipe]) == [table], command
        assert options["source"], f"{command!r} names no source"
    # the recipe outputs the issue lists are all used
    assert {parse_build(c)[0] for c in built.values()} == {
        "sft_general",
        "math_sft",
        "math_sft_s2",
        "code_sft",
        "sft_science_s1",
        "sft_science_s2",
        "sft_tool_calling",
        "swe_sft",
        "preference_pairs",
        "rm_offtopic_pairs",
        "rlhf_prompts",
        "if_rl",
        "if_rl_ifbench",
        "math_rl_v2",
        "code_rl",
        "swe_rl",
    }
    # the RLHF prompts are built from the very tables the reward model trains on
    rm_tables = [
        d.ref.split("@")[0] for d in load_manifest(CASCADE_8B).stage("reward_model").datasets
    ]
    assert sorted(parse_build(built["rlhf_prompts"])[1]["source"]) == sorted(rm_tables)


def test_cascade_train_names_the_build_command_of_a_missing_table(tmp_path: Path) -> None:
    from cli.main import command_app

    lake = Lake(tmp_path / "lake")
    lake.commit("unrelated", pa.table({"x": [1]}), kind="generic", producer="test")
    result = CliRunner().invoke(
        command_app(), ["--lake", str(tmp_path / "lake"), "train", "--manifest", str(CASCADE_8B)]
    )
    assert isinstance(result.exception, CascadeError)
    message = str(result.exception)
    where = f"{CASCADE_8B}: stages[sft_stage1].datasets[0]"
    assert message.startswith(f"{where}: no table 'sft_general' in the lake at "), message
    assert "refusing to train on it; `cascade build dataset sft_general --source <" in message
    assert message.endswith("pin the content_hash it prints in place of the placeholder")
    assert "\n" not in message


def test_a_table_with_other_bytes_is_refused_naming_its_build(tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake")
    info = lake.commit("helpsteer3_pairs", pa.table({"x": [1]}), kind="generic", producer="t")
    (ref,) = [d for d in all_refs() if d.ref == "helpsteer3_pairs@1"]
    where = "stages[reward_model].datasets[1]"
    # the placeholder hash (all zeros) never matches real bytes
    with pytest.raises(DataHashError) as placeholder:
        verify(ref, where, ROOT, tmp_path / "lake")
    assert "does not match expected 0000000000000000" in str(placeholder.value)
    assert f"`{ref.build}` produces it; pin the content_hash it prints in place" in str(
        placeholder.value
    )
    # a real but different hash: same refusal, and pin "here"
    other = ref.model_copy(update={"content_hash": "ab" * 32})
    with pytest.raises(DataHashError, match=r"produces it; pin the content_hash it prints here"):
        verify(other, where, ROOT, tmp_path / "lake")
    # the recorded hash passes
    pinned = ref.model_copy(update={"content_hash": info.content_hash})
    assert verify(pinned, where, ROOT, tmp_path / "lake").location == "lake:helpsteer3_pairs@1"


def test_a_table_no_recipe_builds_says_so(tmp_path: Path) -> None:
    Lake(tmp_path / "lake").commit("x", pa.table({"x": [1]}), kind="generic", producer="t")
    unbuilt = DatasetRef(ref="no_recipe_table@1", content_hash="0" * 64)
    with pytest.raises(DataHashError) as info:
        verify(unbuilt, "stages[s].datasets[3]", ROOT, tmp_path / "lake", build_command)
    assert str(info.value).endswith(
        "no recipe builds it yet (the manifest names no `build` command for it)"
    )
    # no lake at all: the same hint, after the missing lake
    with pytest.raises(FileNotFoundError, match=r"\(use --lake\); no recipe builds it yet"):
        verify(unbuilt, "x", ROOT, tmp_path / "nowhere", build_command)


def test_a_table_a_recipe_builds_names_that_recipe_without_a_build_command(tmp_path: Path) -> None:
    """`math_sft@1` without `build`, on an empty lake: `cascade train` names the recipe
    math_sft and its command, not "no recipe builds it yet"."""
    from cli.main import command_app

    spec = json.loads(CASCADE_8B.read_text())
    stage = spec["stages"][0]
    (math,) = [d for d in stage["datasets"] if d["ref"] == "math_sft@1"]
    del math["build"]
    spec["stages"] = [{**stage, "datasets": [math]}]
    path = tmp_path / "m.json"
    path.write_text(json.dumps(spec))
    Lake(tmp_path / "lake")  # an empty lake
    result = CliRunner().invoke(
        command_app(), ["--lake", str(tmp_path / "lake"), "train", "--manifest", str(path)]
    )
    assert isinstance(result.exception, CascadeError), result.output
    message = str(result.exception)
    assert message.startswith(f"{path}: stages[sft_stage1].datasets[0]: no table 'math_sft'")
    assert message.endswith(
        "refusing to train on it; `cascade build dataset math_sft --source <its sources>` "
        "produces it (the manifest names no `build` command for it; `cascade build show "
        "math_sft` lists the recipe's sources and parameters); pin the content_hash it prints "
        "in place of the placeholder"
    )
    assert "no recipe builds it" not in message and "\n" not in message


def test_build_must_be_a_build_command(tmp_path: Path) -> None:
    spec = json.loads(CASCADE_8B.read_text())
    spec["stages"][0]["datasets"][0]["build"] = "make sft_general"
    path = tmp_path / "m.json"
    path.write_text(json.dumps(spec))
    from training.runner import ManifestError

    with pytest.raises(ManifestError, match=r"datasets\[0\]\.build: Value error, expected a"):
        load_manifest(path)


def test_docstring_examples() -> None:
    import doctest

    import builders.recipes
    import training.datasets

    for module in (builders.recipes, training.datasets):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__
