"""`cascade verify`: every kind on a small file, all input columns kept, lake tables, errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from cli.console import CascadeError
from cli.main import command_app

app = command_app()
runner = CliRunner()


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _invoke(*args: str) -> None:
    result = runner.invoke(app, list(args), catch_exceptions=True)
    if result.exception is not None:
        raise result.exception
    assert result.exit_code == 0, result.output


def test_verify_code_file_keeps_columns(tmp_path: Path, shared_data: Path) -> None:
    rows = [json.loads(line) for line in (shared_data / "sources" / "leetcode_train.jsonl").open()][
        :3
    ]
    data = [
        {
            "id": f"r{i}",
            "extra": i,
            "response": f"```python\n{r['solutions']}```",
            "tests": r["tests"],
        }
        for i, r in enumerate(rows)
    ]
    data[1]["response"] = "```python\nclass Solution:\n    pass\n```"
    data[2]["response"] = "no code"
    out = tmp_path / "out.parquet"
    _invoke(
        "verify",
        "--input",
        str(_write_jsonl(tmp_path / "in.jsonl", data)),
        "--kind",
        "code",
        "--out",
        str(out),
    )
    result = pl.read_parquet(out)
    assert result.columns == ["id", "extra", "response", "tests", "passed", "score", "detail"]
    assert result.get_column("passed").to_list() == [True, False, False]
    assert result.get_column("score").to_list() == [1.0, 0.0, 0.0]
    assert result.get_column("detail")[2] == "no code block in the response"


def test_verify_math_if_and_swe_files(tmp_path: Path) -> None:
    math_in = _write_jsonl(
        tmp_path / "math.jsonl",
        [
            {"response": "<think>..</think>\\boxed{\\dfrac{1}{2}}", "gold": "0.5"},
            {"response": "\\boxed{3}", "gold": "4"},
        ],
    )
    _invoke(
        "verify",
        "--input",
        str(math_in),
        "--kind",
        "math",
        "--out",
        str(tmp_path / "m.jsonl"),
        "--reference-field",
        "gold",
    )
    math_out = pl.read_ndjson(tmp_path / "m.jsonl")
    assert math_out.get_column("passed").to_list() == [True, False]

    if_in = _write_jsonl(
        tmp_path / "if.jsonl",
        [
            {
                "text": "no commas here",
                "instruction_id_list": ["punctuation:no_comma"],
                "kwargs": [{}],
            },
            {"text": "a, b", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]},
        ],
    )
    _invoke(
        "verify",
        "--input",
        str(if_in),
        "--kind",
        "if",
        "--out",
        str(tmp_path / "i.jsonl"),
        "--response-field",
        "text",
    )
    assert pl.read_ndjson(tmp_path / "i.jsonl").get_column("passed").to_list() == [True, False]

    patch = "--- a/x.py\n+++ b/x.py\n@@ -1,1 +1,1 @@\n-a = 1\n+a = 2\n"
    swe_in = _write_jsonl(
        tmp_path / "swe.jsonl",
        [{"response": patch, "patch": patch}, {"response": "", "patch": patch}],
    )
    _invoke("verify", "--input", str(swe_in), "--kind", "swe", "--out", str(tmp_path / "s.jsonl"))
    assert pl.read_ndjson(tmp_path / "s.jsonl").get_column("score").to_list() == [1.0, 0.0]


def test_verify_lake_table_reads_tests_from_metadata(tmp_path: Path) -> None:
    from lake.catalog import Lake

    lake_dir = tmp_path / "lake"
    tests = {"inputs": ["2\n"], "outputs": ["4\n"]}
    frame = pl.DataFrame(
        {
            "id": ["a", "b"],
            "response": ["```python\nprint(int(input())*2)\n```", "```python\nprint(5)\n```"],
            "metadata": [json.dumps({"tests": tests}), json.dumps({"tests": tests})],
        }
    )
    Lake(lake_dir).commit("responses", frame, producer="test")
    _invoke(
        "--lake",
        str(lake_dir),
        "verify",
        "--table",
        "responses",
        "--kind",
        "code",
        "--out",
        "verified",
    )
    lake = Lake(lake_dir)
    out = pl.from_arrow(lake.read("verified"))
    assert out.get_column("passed").to_list() == [True, False]
    assert lake.resolve("verified").parents == ["responses@1"]


def test_bad_input_gives_one_clear_sentence(tmp_path: Path) -> None:
    data = _write_jsonl(tmp_path / "in.jsonl", [{"answer": "1", "output": "x"}])
    with pytest.raises(CascadeError, match=r"in.jsonl:1: field 'response' is missing"):
        _invoke(
            "verify", "--input", str(data), "--kind", "math", "--out", str(tmp_path / "o.jsonl")
        )
    with pytest.raises(CascadeError, match="unknown --kind 'maths'"):
        _invoke(
            "verify", "--input", str(data), "--kind", "maths", "--out", str(tmp_path / "o.jsonl")
        )
    with pytest.raises(CascadeError, match="exactly one of --input"):
        _invoke("verify", "--kind", "math", "--out", str(tmp_path / "o.jsonl"))
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from cli.main import main; sys.argv[0]='cascade'; main()",
            "verify",
            "--input",
            str(tmp_path / "missing.jsonl"),
            "--kind",
            "math",
            "--out",
            "o.jsonl",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert "missing.jsonl does not exist" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_verify_step_keeps_passes_and_drops_with_reasons() -> None:
    from curation.verify.table import verify_step
    from lake.steps import drop_rows

    patch = "--- a/x.py\n+++ b/x.py\n@@ -1,1 +1,1 @@\n-a = 1\n+a = 2\n"
    df = pl.DataFrame(
        {
            "id": ["same", "empty", "noref"],
            "response": [patch, "", patch],
            "patch": [patch, patch, None],
        }
    )
    step = verify_step(df, "swe")
    assert step.kept.get_column("id").to_list() == ["same"]
    assert dict(zip(step.dropped["id"], step.dropped["reason"], strict=True)) == {
        "empty": "verify_failed",
        "noref": "verify_undecided",
    }
    assert step.stats == {"rows_in": 3, "passed": 1, "undecided": 1, "kept": 1}
    drops = drop_rows(step.dropped, input_columns=df.columns, step="verify")
    assert json.loads(drops.filter(pl.col("uid") == "empty")["detail"][0])["score"] == 0.0
    assert verify_step(df, "swe", keep_undecided=True).kept.height == 2


def test_mixed_nested_fields_round_trip_and_bad_lines_are_named(tmp_path: Path) -> None:
    # Functional and stdio tests in one file: `tests` a dict in one row, a list in the next.
    rows = [
        {
            "id": "f",
            "response": "```python\nclass Solution:\n    def f(self, x):\n        return x + 1\n```",
            "tests": {"functional": "assert Solution().f(1) == 2"},
            "kwargs": [{"n": 1}],
        },
        {
            "id": "s",
            "response": "```python\nprint(int(input()) * 2)\n```",
            "tests": [{"input": "2\n", "output": "4\n"}],
            "kwargs": [{"other": "key"}, {}],
        },
    ]
    src = _write_jsonl(tmp_path / "mixed.jsonl", rows)
    _invoke("verify", "--input", str(src), "--kind", "code", "--out", str(tmp_path / "o.jsonl"))
    out = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert [r["passed"] for r in out] == [True, True]
    for before, after in zip(rows, out, strict=True):
        assert {k: after[k] for k in before} == before  # no key gained or lost

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(rows[0]) + "\n{not json\n")
    with pytest.raises(CascadeError, match=r"bad.jsonl:2: invalid JSON"):
        _invoke("verify", "--input", str(bad), "--kind", "code", "--out", str(tmp_path / "x.jsonl"))


def test_generations_are_scored_against_their_prompts_references(tmp_path: Path) -> None:
    from lake.catalog import Lake

    lake_dir = tmp_path / "lake"
    lake = Lake(lake_dir)
    lake.commit(
        "prompts",
        pl.DataFrame(
            {
                "uid": ["s:1", "s:2"],
                "id": ["p1", "p2"],
                "source": ["s", "s"],
                "source_id": ["1", "2"],
                "domain": ["math", "math"],
                "problem": ["1+1?", "2+2?"],
                "answer": ["2", "4"],
                "metadata": ["{}", "{}"],
            }
        ),
        kind="prompts",
    )
    gens = pl.DataFrame(
        {
            "id": ["g1", "g2", "g3"],
            "prompt_id": ["p1", "p2", "p2"],
            "response": ["\\boxed{2}", "\\boxed{5}", "\\boxed{4}"],
            # The generated final answer must never be taken as the reference.
            "final_answer": ["\\boxed{2}", "\\boxed{5}", "\\boxed{4}"],
        }
    )
    gens.write_parquet(tmp_path / "gens.parquet")
    args = ["--lake", str(lake_dir), "verify", "--input", str(tmp_path / "gens.parquet")]
    with pytest.raises(CascadeError, match="carry no reference; give --prompts"):
        _invoke(*args, "--kind", "math", "--out", str(tmp_path / "v.parquet"))
    _invoke(*args, "--kind", "math", "--prompts", "prompts", "--out", str(tmp_path / "v.parquet"))
    scored = pl.read_parquet(tmp_path / "v.parquet")
    assert scored.get_column("passed").to_list() == [True, False, True]
    assert scored.get_column("answer").to_list() == ["2", "4", "4"]
