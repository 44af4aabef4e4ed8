"""`cascade decontaminate` as a user runs it: jsonl in/out, lake tables, errors."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from cli.main import command_app

app = command_app()
runner = CliRunner()

BENCH_ITEM = (
    "A bag holds 7 red marbles, 5 green marbles and 3 yellow marbles. Two marbles are drawn "
    "without replacement. What is the probability that both have the same color?"
)
CLEAN = [
    "Find the sum of all positive divisors of 360.",
    "How many ways can 6 people sit around a round table?",
    "Solve for x: 3x + 7 = 22.",
]


@pytest.fixture
def files(tmp_path: Path) -> Path:
    bench_dir = tmp_path / "benchmarks"
    bench_dir.mkdir()
    (bench_dir / "marbles.jsonl").write_text(json.dumps({"problem": BENCH_ITEM}) + "\n")
    rows = [{"id": f"c{i}", "problem": p} for i, p in enumerate(CLEAN)]
    rows.append({"id": "copy", "problem": "Please solve: " + BENCH_ITEM.replace(" ", "  ")})
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def test_jsonl_in_kept_and_dropped_out(files: Path) -> None:
    result = runner.invoke(
        app,
        [
            "decontaminate",
            "--input", str(files / "in.jsonl"),
            "--benchmarks", str(files / "benchmarks"),
            "--out", str(files / "kept.jsonl"),
            "--dropped", str(files / "dropped.jsonl"),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "4 rows in, 3 kept, 1 dropped (marbles 1)" in result.output
    kept = pl.read_ndjson(files / "kept.jsonl")
    dropped = [json.loads(line) for line in (files / "dropped.jsonl").read_text().splitlines()]
    assert kept["id"].to_list() == ["c0", "c1", "c2"]
    assert [d["id"] for d in dropped] == ["copy"]
    assert dropped[0]["reason"] == "contaminated"
    assert dropped[0]["benchmark"] == "marbles"
    assert dropped[0]["benchmark_id"] == "marbles-0"
    assert dropped[0]["ngram"] in "a bag holds 7 red marbles 5 green marbles and 3 yellow marbles"
    assert dropped[0]["decontam_coverage"] == 1.0


def test_n_and_rule_options_change_what_counts(files: Path) -> None:
    text = "Two marbles are drawn at random from an urn."  # shares one 4-gram with the item
    (files / "one.jsonl").write_text(json.dumps({"problem": text}) + "\n")
    common = ["--input", str(files / "one.jsonl"), "--benchmarks", str(files / "benchmarks")]
    out = ["--out", str(files / "k.jsonl")]
    nine = runner.invoke(app, ["decontaminate", *common, *out, "--rule", "literal"])
    assert "1 kept, 0 dropped" in nine.output
    four = runner.invoke(app, ["decontaminate", *common, *out, "--rule", "literal", "--n", "4"])
    assert "0 kept, 1 dropped" in four.output
    aware = runner.invoke(app, ["decontaminate", *common, *out, "--n", "4"])
    assert "1 kept, 0 dropped" in aware.output


def test_lake_table_in_new_version_and_drops_out(files: Path) -> None:
    from lake.catalog import Lake

    lake_dir = files / "lake"
    lake = Lake(lake_dir)
    rows = [json.loads(line) for line in (files / "in.jsonl").read_text().splitlines()]
    frame = pl.DataFrame(rows).with_columns(
        uid="raw:" + pl.col("id"),
        source=pl.lit("test"),
        source_id=pl.col("id"),
        domain=pl.lit("math"),
        answer=pl.lit(None, pl.String),
        metadata=pl.lit("{}"),
    )
    lake.commit("raw", frame, kind="prompts", producer="test")
    result = runner.invoke(
        app,
        [
            "--lake", str(lake_dir), "decontaminate", "--table", "raw",
            "--benchmarks", str(files / "benchmarks"), "--out", "clean",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert pl.from_arrow(lake.read("clean"))["id"].to_list() == ["c0", "c1", "c2"]
    assert lake.resolve("clean").parents == ["raw@1"]
    drops = pl.from_arrow(lake.read("drops"))
    assert drops.select(
        "output_table", "output_version", "input_table", "input_version", "uid", "step", "reason"
    ).rows() == [("clean", 1, "raw", 1, "raw:copy", "decontaminate", "contaminated")]
    assert json.loads(drops["detail"][0])["benchmark"] == "marbles"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--benchmarks", "x", "--out", "o.jsonl"], "give exactly one of --input FILE or --table"),
        (["--input", "nope.jsonl", "--benchmarks", "x", "--out", "o.jsonl"], "does not exist"),
        (["--input", "{in}", "--benchmarks", "nosuch", "--out", "o.jsonl"], "unknown benchmark"),
        (
            [
                "--input",
                "{in}",
                "--benchmarks",
                "aime24",
                "--benchmark-dir",
                "/no/dir",
                "--out",
                "o.jsonl",
            ],
            "--benchmark-dir /no/dir: no such directory",
        ),
        (["--input", "{in}", "--benchmarks", "{b}", "--out", "o.txt"], "unsupported output"),
        (["--input", "{in}", "--benchmarks", "{b}", "--out", "o.jsonl", "--rule", "x"], "--rule"),
        (["--input", "{bad}", "--benchmarks", "{b}", "--out", "o.jsonl"], "bad.jsonl:2: invalid"),
    ],
)
def test_errors_are_one_sentence(files: Path, args: list[str], message: str) -> None:
    from cli.console import CascadeError

    (files / "bad.jsonl").write_text('{"problem": "ok"}\n{"problem": \n')
    paths = {"in": files / "in.jsonl", "b": files / "benchmarks", "bad": files / "bad.jsonl"}
    args = [a.format(**paths) if "{" in a else a for a in args]
    result = runner.invoke(app, ["decontaminate", *args])
    assert result.exit_code == 1
    assert isinstance(result.exception, CascadeError)
    assert message in str(result.exception)
