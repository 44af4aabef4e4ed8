"""Kill a real `cascade generate` process half-way, re-run it: only the missing samples run.

Also checks the CLI's input handling and errors on a file with a bad line.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from curation.generate import SamplingParams, Teacher, generate_to_lake
from curation.generate.plan import prompts_from_records
from curation.generate.tiny_teacher import build_tiny_teacher
from lake.catalog import Lake

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
PROMPTS, K, CHUNK = 12, 2, 4
TOTAL = PROMPTS * K * 2  # both modes


def cascade(*args: str) -> list[str]:
    return [sys.executable, "-c", "from cli.main import main; main()", *args]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    base = tmp_path_factory.mktemp("resume")
    with open(SHARED / "sources" / "math_train.jsonl") as fh:
        rows = [json.loads(line) for _, line in zip(range(300), fh, strict=False)]
    teacher = str(build_tiny_teacher(base / "teacher", [r["problem"] for r in rows]))
    prompts = base / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows[:PROMPTS]))
    return base, teacher, prompts


def generate_args(lake: Path, teacher: str, prompts: Path) -> list[str]:
    return [
        "--lake", str(lake), "generate", "--input", str(prompts), "--model", teacher,
        "--out", "gens", "--mode", "both", "-k", str(K), "--max-new-tokens", "24",
        "--temperature", "1.0", "--seed", "3", "--batch-size", "4", "--chunk-size", str(CHUNK),
        "--threads", "1", "--no-progress", "--json",
    ]  # fmt: skip


def test_killed_run_resumes_with_only_the_missing_generations(
    setup: tuple[Path, str, Path],
) -> None:
    base, teacher, prompts = setup
    lake_dir = base / "lake"
    args = generate_args(lake_dir, teacher, prompts)
    proc = subprocess.Popen(
        cascade(*args), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 240
    lake = Lake(lake_dir)
    while time.monotonic() < deadline and proc.poll() is None:
        if len(lake.versions("gens")) >= 2:
            break
        time.sleep(0.2)
    assert proc.poll() is None, f"finished before it could be killed: {proc.communicate()}"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = lake.read("gens").num_rows
    assert 0 < before < TOTAL
    assert before % CHUNK == 0  # whole chunks only: each is one atomic commit

    rerun = subprocess.run(cascade(*args), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    report = json.loads(rerun.stdout.strip().splitlines()[-1])
    assert report["planned"] == TOTAL
    assert report["cached"] == before
    assert report["generated"] == TOTAL - before
    rows = lake.read("gens").to_pylist()
    assert len(rows) == TOTAL and len({r["id"] for r in rows}) == TOTAL

    # The resumed table holds exactly what one uninterrupted run produces.
    records = [json.loads(line) for line in prompts.read_text().splitlines()]
    reference = Lake(base / "reference")
    generate_to_lake(
        reference, prompts_from_records(records, origin=str(prompts)), output="gens",
        teacher=Teacher(teacher), backend="hf",
        backend_options={"batch_size": 8, "num_threads": 1}, modes=["think", "no_think"],
        k=K, sampling=SamplingParams(max_new_tokens=24, temperature=1.0), seed=3,
    )  # fmt: skip
    want = {r["id"]: r["response"] for r in reference.read("gens").to_pylist()}
    assert {r["id"]: r["response"] for r in rows} == want


def test_cli_names_the_bad_line(setup: tuple[Path, str, Path]) -> None:
    base, teacher, prompts = setup
    bad = base / "bad.jsonl"
    bad.write_text('{"problem": "1+1?"}\n{"question": "2+2?"}\n')
    args = generate_args(base / "lake_bad", teacher, bad)
    result = subprocess.run(cascade(*args), cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert f"{bad}:2: no chat to send: field 'problem' is missing" in result.stderr
    assert "Traceback" not in result.stdout + result.stderr


def test_cli_reads_a_lake_table_and_records_lineage(
    setup: tuple[Path, str, Path], tmp_path: Path
) -> None:
    import pyarrow as pa
    from typer.testing import CliRunner

    from cli.main import command_app

    _, teacher, prompts = setup
    records = [json.loads(line) for line in prompts.read_text().splitlines()[:3]]
    lake = Lake(tmp_path / "lake")
    table = pa.table(
        {
            "uid": [f"math_train:{i}" for i in range(3)],
            "id": [f"p{i}" for i in range(3)],
            "source": ["math_train"] * 3,
            "source_id": [str(i) for i in range(3)],
            "domain": ["math"] * 3,
            "problem": [r["problem"] for r in records],
            "answer": [r["answer"] for r in records],
            "metadata": [None] * 3,
        }
    )
    lake.commit("prompts", table, kind="prompts")
    app = command_app()
    args = [
        "--lake", str(tmp_path / "lake"), "generate", "--input", "prompts", "--model", teacher,
        "--out", "gens", "--mode", "both", "--mode-switch", "flag", "--max-new-tokens", "4",
        "--threads", "1", "--no-progress", "--json",
    ]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    # CliRunner mixes stderr (transformers' loading bar) into output: find the report line.
    report = result.output[result.output.index('{"output"') :].splitlines()[0]
    assert json.loads(report)["generated"] == 6
    info = lake.resolve("gens")
    assert info.parents == ["prompts@1"] and info.kind == "generations"
    assert info.params["mode_switch"] == "flag" and info.params["modes"] == [
        "think",
        "no_think",
    ]
    rows = lake.read("gens").to_pylist()
    assert sorted(r["prompt_id"] for r in rows) == ["p0", "p0", "p1", "p1", "p2", "p2"]
    # The stored chat is the prompt itself; the /think flag was only added on the wire.
    for row in rows:
        (turn,) = json.loads(row["messages"])
        assert turn["content"] == records[int(row["prompt_id"][1])]["problem"]
