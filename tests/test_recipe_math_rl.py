"""math_rl_v2 with its model steps, end to end against a scripted OpenAI-compatible server:
exact rows kept and dropped, the SQL a user asks, and a killed build that resumes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from builders import math_rl_v2
from builders.runner import build_dataset, parse_overrides
from lake.catalog import Lake
from tests.scripted_openai import ScriptedServer

ROOT = Path(__file__).resolve().parents[1]
N = 12
# Problem i: "What is 7 times i + 3?" answer 7i + 3. Prompt 2's reference is wrong (noisy
# source). The weak model solves prompt i in WEAK[i] of 4 samples.
WEAK = [4, 3, 1, 0, 4, 2, 0, 1, 3, 2, 0, 4]


def problem(i: int) -> str:
    return f"A shop sells {i + 3} boxes; what is 7 times {i} plus 3, written as one integer?"


def index_of(user: str) -> int:
    return int(user.split("7 times ")[1].split(" ")[0])


def teacher(user: str, sample: int) -> str:
    i = index_of(user)
    return f"<think>7*{i}+3</think>\\boxed{{{7 * i + 3}}}"


def weak(user: str, sample: int) -> str:
    i = index_of(user)
    return f"\\boxed{{{7 * i + 3 if sample < WEAK[i] else 1}}}"


def write_sources(path: Path) -> Path:
    rows = [
        {"problem": problem(i), "answer": str(7 * i + 3 if i != 2 else 999), "n": i}
        for i in range(N)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def overrides(server: ScriptedServer, k_weak: int = 4) -> list[str]:
    options = json.dumps({"base_url": server.base_url, "api_key_env": None, "concurrency": 4})
    return [
        "teacher.model=teacher",
        "teacher.backend=openai",
        f"teacher.backend_options={options}",
        "teacher.k=3",
        "weak.model=weak",
        "weak.backend=openai",
        f"weak.backend_options={options}",
        f"weak.k={k_weak}",
        "sft_datasets=math_sft",
        "benchmarks=aime24",
    ]


def test_math_rl_v2_keeps_exactly_the_right_problems(
    tmp_path: Path, shared_data: Path, lake: Lake
) -> None:
    sft = pl.DataFrame({"uid": ["sft:1"], "id": ["x"], "problem": [problem(5)]})
    lake.commit("math_sft", sft, kind="generic")
    source = write_sources(tmp_path / "numina.jsonl")
    with ScriptedServer({"teacher": teacher, "weak": weak}) as server:
        params = parse_overrides(
            [*overrides(server), f"benchmark_dir={shared_data / 'benchmarks'}"],
            math_rl_v2.DEFAULTS,
        )
        report = build_dataset(
            lake, math_rl_v2, sources=[str(source)], overrides=params, manifests_dir=tmp_path
        )
    kept = pl.from_arrow(lake.read("math_rl_v2"))
    # Easy (weak >= 3/4): 0, 1, 4, 8, 11. Wrong reference: 2. In the SFT set: 5.
    assert sorted(kept["uid"].to_list()) == sorted(f"numina:{i + 1}" for i in (3, 6, 7, 9, 10))
    assert kept["weak_pass_rate"].to_list() == [0.0, 0.0, 0.25, 0.5, 0.0]
    why = dict(
        lake.sql(
            "SELECT uid, reason FROM drops WHERE output_table = 'math_rl_v2' AND output_version = 1"
        ).fetchall()
    )
    assert why == {
        "numina:1": "too_easy",
        "numina:2": "too_easy",
        "numina:3": "majority_mismatch",
        "numina:5": "too_easy",
        "numina:6": "in_sft_set",
        "numina:9": "too_easy",
        "numina:12": "too_easy",
    }
    assert [f.step for f in report.manifest.funnel][-4:] == [
        "majority_answer",
        "weak_pass_rate",
        "too_easy",
        "disjoint_from_sft",
    ]
    # "Why is this problem not in math_rl_v2@1?" is one WHERE on drops.
    detail = lake.sql(
        "SELECT step, reason, detail FROM drops WHERE output_table = 'math_rl_v2' "
        "AND output_version = 1 AND uid = 'numina:3'"
    ).fetchall()[0]
    assert detail[:2] == ("majority_answer", "majority_mismatch")
    assert json.loads(detail[2])["majority_answer"] == "17"


def test_a_killed_build_resumes_without_regenerating(tmp_path: Path, shared_data: Path) -> None:
    lake_dir = tmp_path / "lake"
    Lake(lake_dir).commit(
        "math_sft",
        pl.DataFrame({"uid": ["s"], "id": ["x"], "problem": ["unrelated"]}),
        kind="generic",
    )
    source = write_sources(tmp_path / "numina.jsonl")
    stall_after = 100
    state = {"stall": True}

    def slow_weak(user: str, sample: int) -> str:
        return weak(user, sample)

    with ScriptedServer({"teacher": teacher, "weak": slow_weak}) as server:
        original = server.models["weak"]

        def stalling(user: str, sample: int) -> str:
            if state["stall"] and server.requests_for("weak") > stall_after:
                time.sleep(60)
            return original(user, sample)

        server.models["weak"] = stalling
        args = [
            sys.executable, "-c", "from cli.main import main; main()", "--lake", str(lake_dir),
            "build", "dataset", "math_rl_v2", "--source", str(source), "--manifests",
            str(tmp_path / "m"), "--set", f"benchmark_dir={shared_data / 'benchmarks'}",
        ]  # fmt: skip
        for pair in overrides(server, k_weak=16):
            args += ["--set", pair]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + 240
        while server.requests_for("weak") <= stall_after and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)
        proc.kill()
        proc.wait()
        committed = (
            Lake(lake_dir)
            .sql("SELECT count(*) FROM generations WHERE model = 'weak'")
            .fetchall()[0][0]
        )
        assert committed >= 64  # at least one chunk landed before the kill
        state["stall"] = False
        before = server.requests_for("weak")
        done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        planned = 16 * (N - 1)  # every problem but the one the majority check dropped
        assert server.requests_for("weak") - before == planned - committed
    assert Lake(lake_dir).resolve("math_rl_v2").version == 1


@pytest.mark.parametrize(
    ("pairs", "expected"),
    [
        (
            ["weak.k=2", "weak.model=/m"],
            {"weak": {**math_rl_v2.DEFAULTS["weak"], "k": 2, "model": "/m"}},
        ),
        (["teacher=none"], {"teacher": None}),
    ],
)
def test_model_parameters_take_dotted_overrides(pairs: list[str], expected: dict) -> None:
    assert parse_overrides(pairs, math_rl_v2.DEFAULTS) == expected
