"""What listing commands print: every format, no name cut when stdout is not a terminal,
errors that name the recipe, and DeepSpeed's notes kept off stdout."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from cli.main import command_app

app = command_app()
runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
LONG = "math_rl_v2_sources_with_a_rather_long_table_name"


def invoke(*args: str):
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def lake_with_long_names(tmp_path: Path) -> str:
    src = tmp_path / "src.jsonl"
    src.write_text(
        "".join(json.dumps({"problem": f"{i} + 1?", "answer": str(i + 1)}) + "\n" for i in range(5))
    )
    lake = str(tmp_path / "lake")
    for suffix in ("_a", "_b"):
        invoke("--lake", lake, "ingest", str(src), "--table", LONG + suffix)
    return lake


def test_lake_listings_never_cut_a_name_and_take_every_format(tmp_path: Path) -> None:
    lake = lake_with_long_names(tmp_path)
    table = invoke("--lake", lake, "lake", "ls")  # CliRunner's stdout is not a terminal
    assert LONG + "_a" in table and LONG + "_b" in table and "…" not in table
    rows = list(
        csv.DictReader(io.StringIO(invoke("--lake", lake, "lake", "ls", "--format", "csv")))
    )
    assert [r["table"] for r in rows] == [LONG + "_a", LONG + "_b"]
    assert rows[0]["rows"] == "5" and len(rows[0]["content_hash"]) == 64
    listed = json.loads(invoke("--lake", lake, "lake", "ls", "--format", "json"))
    assert [t["table"] for t in listed] == [LONG + "_a", LONG + "_b"] and listed[0]["rows"] == 5
    lines = invoke("--lake", lake, "lake", "ls", "--format", "jsonl").splitlines()
    assert [json.loads(line)["table"] for line in lines] == [LONG + "_a", LONG + "_b"]

    log = invoke("--lake", lake, "lake", "log", LONG + "_a")
    assert "producer" in log and "content_hash" in log and "cascade ingest" in log
    (version,) = json.loads(invoke("--lake", lake, "lake", "log", LONG + "_a", "--format", "json"))
    assert version["version"] == 1 and version["producer"] == "cascade ingest"
    logged = list(
        csv.DictReader(
            io.StringIO(invoke("--lake", lake, "lake", "log", LONG + "_a", "--format", "csv"))
        )
    )
    assert logged[0]["content_hash"] == version["content_hash"]

    (shown,) = json.loads(invoke("--lake", lake, "lake", "show", LONG + "_a@1", "--format", "json"))
    assert shown["ref"] == LONG + "_a@1" and shown["rows"] == 5 and "problem" in shown["schema"]
    assert (
        json.loads(invoke("--lake", lake, "lake", "show", LONG + "_a", "--format", "jsonl"))[
            "content_hash"
        ]
        == version["content_hash"]
    )

    bad = runner.invoke(app, ["--lake", lake, "lake", "ls", "--format", "xml"])
    assert bad.exit_code != 0 and "unknown --format 'xml'" in str(bad.exception)


def test_build_list_and_show_in_every_format() -> None:
    table = invoke("build", "list")
    assert "default, demo, toy, toy-heldout" in table  # the profiles column, never cut
    listed = {r["recipe"]: r for r in json.loads(invoke("build", "list", "--format", "json"))}
    assert listed["math_rl_v2"]["profiles"] == ["default", "demo", "toy", "toy-heldout"]
    assert listed["math_rl_v2"]["domain"] == "math"
    rows = list(csv.DictReader(io.StringIO(invoke("build", "list", "--format", "csv"))))
    assert {r["recipe"] for r in rows} == set(listed)
    assert len(invoke("build", "list", "--format", "jsonl").splitlines()) == len(listed)

    shown = json.loads(invoke("build", "show", "math_rl_v2", "--format", "json"))
    assert shown["parameters"]["weak"] and shown["steps"][0]["step"] == "rule_filters"
    steps = list(
        csv.DictReader(io.StringIO(invoke("build", "show", "math_rl_v2", "--format", "csv")))
    )
    assert [s["step"] for s in steps] == [s["step"] for s in shown["steps"]]
    weak = next(s for s in shown["steps"] if s["step"] == "weak_pass_rate")
    text = invoke("build", "show", "math_rl_v2")
    # a parameter is printed whole (it was cut at 160 characters, mid-word)
    assert json.dumps(weak["params"]["sampler"]) in text.replace("\n", "")


def test_recipe_errors_name_the_recipe_not_the_output_table(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    for extra, expected in (
        ([], "recipe math_rl_v2 needs at least one --source"),
        (["--profile", "nope"], "recipe math_rl_v2 has no profile 'nope'"),
    ):
        result = runner.invoke(
            app, ["--lake", lake, "build", "dataset", "math_rl_v2", "--out", "t55", *extra]
        )
        assert result.exit_code != 0 and expected in str(result.exception), result.exception


def test_deepspeed_notes_go_to_stderr() -> None:
    script = (
        "import torch\n"
        "from training.distributed import init_distributed, make_deepspeed_engine\n"
        "from schemas.training_manifest import DeepSpeedSpec, OptimizerSpec\n"
        "init_distributed()\n"
        "make_deepspeed_engine(torch.nn.Linear(2, 2), OptimizerSpec(learning_rate=1e-3),\n"
        "                      DeepSpeedSpec(zero_stage=0, bf16=False), 1, 1, 10, False)\n"
        "print('done')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "done\n"  # nothing of DeepSpeed's on stdout
    assert "Setting accelerator to CPU" in proc.stderr or "accelerator" in proc.stderr.lower()
