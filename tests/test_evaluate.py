"""`cascade eval`: exact scores against a scripted server whose right answers are known per
item and sample, for math, code and instruction following; resumable; rows in the lake;
settings from presets; training data's decontamination flagged."""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pytest
from scripted_openai import ScriptedServer
from typer.testing import CliRunner

from curation.evaluate.benchmarks import load_items
from curation.evaluate.run import (
    decontamination_status,
    evaluate,
    settings_for,
    training_benchmarks,
)
from curation.evaluate.scores import pass_at_k, score_benchmark
from lake.catalog import Lake

BENCHMARKS = Path(__file__).resolve().parents[2] / "shared" / "data" / "benchmarks"


def openai(server: ScriptedServer) -> dict:
    return {"base_url": server.base_url, "api_key_env": None, "concurrency": 4}


def test_pass_at_k_and_avg_at_k_with_its_standard_error() -> None:
    assert pass_at_k(5, 1, 1) == pytest.approx(0.2)
    assert pass_at_k(4, 2, 2) == pytest.approx(1 - 1 / 6)
    assert pass_at_k(4, 3, 2) == 1.0 and pass_at_k(4, 0, 4) == 0.0
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(2, 1, 3)
    samples = pl.DataFrame(
        {
            "item_id": ["a", "a", "b", "b", "c", "c"],
            "passed": [True, True, True, None, False, False],
        }
    )
    score = score_benchmark("x", samples)
    assert (score.items, score.k, score.undecided) == (3, 2, 1)
    assert score.avg == pytest.approx(0.5)
    assert score.stderr == pytest.approx(0.5 / math.sqrt(3))  # sd of (1, .5, 0) over sqrt(3)
    assert score.pass_at_k == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="different sample counts"):
        score_benchmark("x", samples.head(5))


def test_presets_hold_the_reports_settings_and_every_value_can_be_overridden() -> None:
    aime = settings_for("cascade1", "aime24")
    assert (aime["k"], aime["temperature"], aime["top_p"], aime["mode"]) == (64, 0.6, 0.95, "think")
    assert settings_for("cascade1", "ifeval")["mode"] == "no_think"
    assert settings_for("cascade1", "ifbench")["mode"] == "think"
    assert settings_for("cascade2", "humaneval")["temperature"] == 1.0
    mine = settings_for("cascade1", "aime24", {"k": 4, "aime24.max_new_tokens": 512})
    assert (mine["k"], mine["max_new_tokens"]) == (4, 512)
    other = settings_for("cascade1", "math500", {"aime24.k": 2})
    assert other["k"] == 8  # an override for one benchmark leaves the others alone
    with pytest.raises(ValueError, match="unknown evaluation setting 'temprature'"):
        settings_for("cascade1", "aime24", {"temprature": 1.0})
    with pytest.raises(ValueError, match="unknown preset 'cascade3'"):
        settings_for("cascade3", "aime24")
    with pytest.raises(ValueError, match="no evaluation for benchmark 'mmlu'"):
        settings_for("cascade1", "mmlu")


def test_math_scores_are_exact_resumable_and_queryable(tmp_path: Path) -> None:
    items = load_items("aime24", BENCHMARKS, allow_hub=False).frame.head(3)
    answers = dict(zip(items.get_column("prompt"), items.get_column("answer"), strict=True))
    first, second, third = items.get_column("prompt").to_list()

    def reply(user: str, sample: int) -> str:
        right = answers[user]
        if user == first or (user == second and sample == 0):
            return f"<think>work</think>The answer is $\\boxed{{{right}}}$."
        return "<think>work</think>The answer is $\\boxed{-1}$."

    lake = Lake(tmp_path / "lake")
    with ScriptedServer({"policy": reply}) as server:
        kwargs = dict(
            backend="openai",
            backend_options=openai(server),
            benchmark_dir=BENCHMARKS,
            overrides={"k": 2, "max_new_tokens": 64},
            limit=3,
        )
        report = evaluate(lake, "policy", ["aime24"], **kwargs)
        asked = len(server.requests)
        again = evaluate(lake, "policy", ["aime24"], **kwargs)
        assert len(server.requests) == asked == 6  # the second run generated nothing
    (result,) = report.results
    assert (result.score.items, result.score.k) == (3, 2)
    assert result.score.avg == pytest.approx(0.5)
    assert result.score.pass_at_k == pytest.approx(2 / 3)
    assert result.decontamination == "unknown"  # a served model: no training provenance
    assert again.results[0].score == result.score
    rows = lake.sql(
        "SELECT item_id, sample_index, passed, benchmark_hash, settings FROM evaluations "
        "ORDER BY item_id, sample_index"
    ).pl()
    assert rows.height == 6  # nothing written twice
    by_item = rows.group_by("item_id", maintain_order=True).agg(pl.col("passed"))
    assert sorted(map(tuple, by_item.get_column("passed").to_list())) == [
        (False, False),
        (True, False),
        (True, True),
    ]
    assert set(rows.get_column("benchmark_hash")) == {result.content_hash}
    settings = json.loads(rows.get_column("settings")[0])
    assert (settings["k"], settings["temperature"], settings["limit"]) == (2, 0.6, 3)


def test_code_and_instruction_following_are_scored_by_their_verifiers(tmp_path: Path) -> None:
    bench = tmp_path / "bench"
    bench.mkdir()
    problems = [
        {
            "problem": "Print the sum of two integers.",
            "tests": {"inputs": ["1 2\n"], "outputs": ["3\n"]},
        },
        {
            "problem": "Print the product of two integers.",
            "tests": {"inputs": ["2 5\n"], "outputs": ["10\n"]},
        },
    ]
    (bench / "code_contests_test.jsonl").write_text("".join(json.dumps(p) + "\n" for p in problems))
    ifeval = [
        {
            "key": 1,
            "prompt": "Describe a cat without commas.",
            "instruction_id_list": ["punctuation:no_comma"],
            "kwargs": [{}],
        },
        {
            "key": 2,
            "prompt": "Describe a dog in lowercase.",
            "instruction_id_list": ["change_case:english_lowercase"],
            "kwargs": [{}],
        },
    ]
    (bench / "ifeval.jsonl").write_text("".join(json.dumps(p) + "\n" for p in ifeval))

    def coder(user: str, sample: int) -> str:
        op = "+" if "sum" in user else "-"  # the product is answered wrongly
        return f"```python\na, b = map(int, input().split())\nprint(a {op} b)\n```"

    def writer(user: str, sample: int) -> str:
        return "a calm cat sleeps all day" if "cat" in user else "A Dog, Loud And Happy."

    lake = Lake(tmp_path / "lake")
    with ScriptedServer({"coder": coder, "writer": writer}) as server:
        common = dict(backend="openai", backend_options=openai(server), benchmark_dir=bench)
        code = evaluate(lake, "coder", ["code_contests"], overrides={"k": 1}, **common)
        follows = evaluate(lake, "writer", ["ifeval"], overrides={"k": 1}, **common)
        asked = {r["model"]: r for r in server.requests}
    assert code.results[0].score.avg == pytest.approx(0.5)
    assert follows.results[0].score.avg == pytest.approx(0.5)
    assert follows.results[0].settings["mode"] == "no_think"  # IFEval's preset mode
    assert asked["writer"]["chat_template_kwargs"] == {"enable_thinking": False}
    assert asked["coder"]["chat_template_kwargs"] == {"enable_thinking": True}
    verdicts = lake.sql(
        "SELECT benchmark, verifier, item_id, passed FROM evaluations ORDER BY benchmark, item_id"
    ).fetchall()
    assert verdicts == [
        ("code_contests", "code", "code_contests-0", True),
        ("code_contests", "code", "code_contests-1", False),
        ("ifeval", "if", "1", True),
        ("ifeval", "if", "2", False),
    ]


def test_training_data_not_kept_apart_from_a_benchmark_is_flagged(tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake")
    aime = load_items("aime24", BENCHMARKS, allow_hub=False)
    math500 = load_items("math500", BENCHMARKS, allow_hub=False)
    manifests = lake.path / "manifests" / "datasets"
    for name, used in (("math_sft", [aime]), ("math_rl", [aime, math500])):
        (manifests / name).mkdir(parents=True)
        entries = [{"name": b.name, "content_hash": b.content_hash} for b in used]
        (manifests / name / "v1.json").write_text(json.dumps({"benchmarks": entries}))
    sft, rl = tmp_path / "sft" / "final", tmp_path / "rl" / "final"
    for path, ref, start in ((sft, "math_sft@1", "base"), (rl, "math_rl@1", str(sft))):
        path.mkdir(parents=True)
        record = {"datasets": [{"ref": ref}], "init_from": start}
        (path / "trained_on.json").write_text(json.dumps(record))

    chain = training_benchmarks(lake, str(rl))
    assert [d["ref"] for d in chain] == ["math_rl@1", "math_sft@1"]  # back through the cascade
    assert decontamination_status(chain, aime) == "clean"
    assert decontamination_status(chain, math500) == (
        "CONTAMINATION RISK: not decontaminated in math_sft@1"
    )
    assert training_benchmarks(lake, "Qwen/Qwen3-8B") is None
    (rl / "trained_on.json").write_text(json.dumps({"datasets": [{"ref": "other@2"}]}))
    assert decontamination_status(training_benchmarks(lake, str(rl)), aime) == (
        "unknown for other@2 (no manifest)"
    )


def test_cli_prints_the_table_and_json(tmp_path: Path) -> None:
    from cli.main import command_app

    def reply(user: str, sample: int) -> str:
        return "<think>x</think>\\boxed{0}"

    with ScriptedServer({"policy": reply}) as server:
        args = [
            "--lake", str(tmp_path / "lake"), "eval", "--model", "policy",
            "--benchmarks", "aime24,gsm8k", "--backend", "openai", "--base-url", server.base_url,
            "--benchmark-dir", str(BENCHMARKS), "--limit", "2", "--set", "k=1",
            "--set", "gsm8k.k=2",
        ]  # fmt: skip
        shown = CliRunner().invoke(command_app(), args)
        listed = CliRunner().invoke(command_app(), [*args, "--format", "json"])
    assert shown.exit_code == 0, shown.output
    assert "aime24" in shown.output and "gsm8k" in shown.output and "avg@k" in shown.output
    records = {r["benchmark"]: r for r in json.loads(listed.stdout)}
    assert records["aime24"]["k"] == 1 and records["gsm8k"]["k"] == 2
    assert records["gsm8k"]["items"] == 2 and records["gsm8k"]["cached"] == 4
    bad = CliRunner().invoke(command_app(), [*args[:-4], "--set", "nope=1"])
    assert bad.exit_code != 0 and "unknown evaluation setting 'nope'" in str(bad.exception)


def test_stage_table_marks_changes_and_regressions() -> None:
    from curation.evaluate.stages import stage_table, with_changes

    rows = [
        {"stage": "sft", "benchmark": "aime", "score": 0.50, "stderr": 0.02},
        {"stage": "sft", "benchmark": "ifeval", "score": 0.70, "stderr": 0.02},
        {"stage": "if_rl", "benchmark": "aime", "score": 0.49, "stderr": 0.02},
        {"stage": "if_rl", "benchmark": "ifeval", "score": 0.90, "stderr": 0.02},
        {"stage": "math_rl", "benchmark": "aime", "score": 0.60, "stderr": 0.02},
        {"stage": "math_rl", "benchmark": "ifeval", "score": 0.80, "stderr": 0.02},
    ]
    changes = [(r["change"], r["regression"]) for r in with_changes(rows)]
    assert changes[:2] == [(None, False), (None, False)]
    assert changes[2][1] is False  # -1 point is within noise (2 x 2.8 points)
    assert changes[5][0] == pytest.approx(-0.10) and changes[5][1] is True
    assert stage_table(rows) == [
        {"stage": "sft", "aime": "50.0", "ifeval": "70.0"},
        {"stage": "if_rl", "aime": "49.0 (-1.0)", "ifeval": "90.0 (+20.0)"},
        {"stage": "math_rl", "aime": "60.0 (+11.0)", "ifeval": "80.0 (-10.0 ▼)"},
    ]


def test_cascade_train_scores_its_suite_after_every_stage(tmp_path: Path) -> None:
    from test_training_sft import gsm8k_chats, tiny_manifest, write_jsonl

    from cli.main import command_app

    data = tmp_path / "chats.jsonl"
    sha = write_jsonl(data, gsm8k_chats(24))
    path = tiny_manifest(tmp_path, data, sha, "run", max_steps=2)
    spec = json.loads(path.read_text())
    second = {**spec["stages"][0], "name": "sft2"}
    spec["stages"].append(second)
    held_out = [{"problem": f"What is {n} + {n}?", "answer": str(2 * n)} for n in (3, 4, 5)]
    (tmp_path / "held_out.jsonl").write_text("".join(json.dumps(r) + "\n" for r in held_out))
    spec["evaluation"] = {
        "benchmarks": ["held_out.jsonl"],
        "settings": {"k": 2, "max_new_tokens": 4, "temperature": 1.0},
        "limit": 2,
    }
    path.write_text(json.dumps(spec))
    lake = str(tmp_path / "lake")
    result = CliRunner().invoke(command_app(), ["--lake", lake, "train", "--manifest", str(path)])
    assert result.exit_code == 0, (result.output, result.exception)
    rows = json.loads((tmp_path / "run" / "evaluation.json").read_text())["rows"]
    assert [(r["stage"], r["benchmark"], r["items"], r["k"]) for r in rows] == [
        ("sft1", "held_out", 2, 2),
        ("sft2", "held_out", 2, 2),
    ]
    assert rows[0]["change"] is None
    assert rows[1]["change"] == pytest.approx(rows[1]["score"] - rows[0]["score"])
    assert "evaluation after each stage" in result.output and "sft2" in result.output
    scored = (
        Lake(lake)
        .sql("SELECT count(DISTINCT model_identity), count(*) FROM evaluations")
        .fetchone()
    )
    assert scored == (2, 8)  # each stage's model: 2 items x 2 samples
    stages = (
        Lake(lake)
        .sql("SELECT DISTINCT regexp_extract(model, '/(sft[12])/final$', 1) FROM evaluations")
        .fetchall()
    )
    assert sorted(stages) == [("sft1",), ("sft2",)]  # as the README's query names them
    lost = (
        Lake(lake)
        .sql(
            "SELECT item_id FROM evaluations GROUP BY item_id "
            "HAVING count_if(passed AND model LIKE '%/sft1/final') > 0 "
            "AND count_if(passed AND model LIKE '%/sft2/final') = 0"
        )
        .fetchall()
    )
    verdicts = Lake(lake).sql("SELECT item_id, model, passed FROM evaluations").fetchall()
    right = {(i, m.split("/")[-2]) for i, m, p in verdicts if p}
    expected = {i for i, stage in right if stage == "sft1" and (i, "sft2") not in right}
    assert {i for (i,) in lost} == expected

    spec["evaluation"]["benchmarks"] = ["aime2024x"]
    path.write_text(json.dumps(spec))
    typo = CliRunner().invoke(command_app(), ["--lake", lake, "train", "--manifest", str(path)])
    assert typo.exit_code != 0 and "no evaluation for benchmark 'aime2024x'" in str(typo.exception)


def test_a_held_out_lake_table_is_a_benchmark(tmp_path: Path) -> None:
    import pyarrow as pa

    lake = Lake(tmp_path / "lake")
    held = [
        {"uid": f"toy-{n}", "problem": f"What is {n} + {n}?", "answer": str(2 * n)}
        for n in range(4)
    ]
    lake.commit("math_heldout", pa.Table.from_pylist(held))

    def reply(user: str, sample: int) -> str:
        n = int(user.split()[2])
        return f"<think>add</think>\\boxed{{{2 * n if n % 2 == 0 else 0}}}"

    with ScriptedServer({"toy": reply}) as server:
        report = evaluate(
            lake, "toy", ["lake:math_heldout"], backend="openai",
            backend_options=openai(server), overrides={"k": 1},
        )  # fmt: skip
    (result,) = report.results
    assert (result.score.benchmark, result.score.items, result.score.avg) == (
        "math_heldout",
        4,
        0.5,
    )
    assert result.origin == "math_heldout@1"
    passed = lake.sql("SELECT item_id, passed FROM evaluations ORDER BY item_id").fetchall()
    assert passed == [("toy-0", True), ("toy-1", False), ("toy-2", True), ("toy-3", False)]
    twice = [{"uid": "t", "problem": "1+1?", "answer": "2"}] * 2
    lake.commit("twice_heldout", pa.Table.from_pylist(twice))
    with pytest.raises(ValueError, match=r"twice_heldout@1: item ids repeat \(t\)"):
        evaluate(lake, "toy", ["lake:twice_heldout"])
    lake.commit("bad_heldout", pa.Table.from_pylist([{"uid": "x", "question": "?"}]))
    with pytest.raises(ValueError, match=r"bad_heldout@1 row 0: a benchmark item needs `problem`"):
        evaluate(lake, "toy", ["lake:bad_heldout"])


@pytest.mark.parametrize(
    ("response", "chosen"),
    [
        ("The answer is C.", "C"),
        ("Answer: (B)", "B"),
        ("**Answer:** D", "D"),
        ("so the correct option is A", "A"),
        ("I think the answer is (E) because", "E"),
        ("final answer is $\\boxed{C}$", "C"),
        ("\\boxed{\\text{G}}", "G"),
        ("Let me see.\n\n(B)", "B"),
        ("Between (A) and (C), I pick (C) here", "C"),
        ("<think>answer is A</think>The answer is D", "D"),
        ("<think>the answer is A", None),  # cut while thinking
        ("the answer is a number", None),  # a lowercase word is not a choice
        ("Answer: Because of X", None),
        ("So it is J", None),
        ("Answer: K", None),  # outside A-J
    ],
)
def test_the_chosen_letter_is_read_however_it_is_stated(response: str, chosen: str) -> None:
    from curation.verify.choice import extract_choice

    assert extract_choice(response) == chosen


def test_multiple_choice_benchmarks_shuffle_once_and_score_letters(tmp_path: Path) -> None:
    from curation.evaluate.benchmarks import EVAL_BENCHMARKS
    from curation.verify.choice import verify_choice

    assert verify_choice("Answer: E", "E", options=4).passed is False  # only A-D exist
    assert verify_choice("Answer: C", "c").passed is True
    assert verify_choice("Answer: C", "42").bad_input == "reference"
    gpqa = EVAL_BENCHMARKS["gpqa_diamond"]
    record = {
        "Record ID": "rec1", "Question": "Which is a noble gas?", "Correct Answer": "Neon",
        "Incorrect Answer 1": "Iron", "Incorrect Answer 2": "Sodium", "Incorrect Answer 3": "Carbon",
    }  # fmt: skip
    prompt, letter = gpqa.prompt(record), gpqa.reference(record)["correct_choice"]
    assert prompt == gpqa.prompt(dict(record)) and f"{letter}) Neon" in prompt
    assert sorted(line[0] for line in prompt.splitlines() if line[1:3] == ") ") == list("ABCD")

    items = [
        {"id": "q1", "problem": "2+2? A) 3 B) 4", "correct_choice": "B"},
        {"id": "q2", "problem": "Sky? A) blue B) green", "correct_choice": "A"},
    ]
    (tmp_path / "mc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in items))
    with ScriptedServer({"m": lambda user, sample: "<think>hm</think>Answer: B"}) as server:
        report = evaluate(
            Lake(tmp_path / "lake"), "m", [str(tmp_path / "mc.jsonl")], backend="openai",
            backend_options=openai(server), overrides={"k": 1},
        )  # fmt: skip
    (result,) = report.results
    assert (result.score.avg, result.settings["mode"]) == (0.5, "think")


def test_a_dataset_report_shows_scores_of_models_trained_on_it(tmp_path: Path) -> None:
    import pyarrow as pa

    from builders.publish.report import gather_report, render_report

    lake = Lake(tmp_path / "lake")
    lake.commit("math_sft", pa.Table.from_pylist([{"uid": "a", "problem": "1+1", "answer": "2"}]))
    lake.commit("other", pa.Table.from_pylist([{"uid": "b", "problem": "2+2", "answer": "4"}]))
    sft, rl = tmp_path / "sft" / "final", tmp_path / "rl" / "final"
    for path, ref, start in ((sft, "math_sft@1", "base"), (rl, "other@1", str(sft))):
        path.mkdir(parents=True)
        (path / "trained_on.json").write_text(
            json.dumps({"datasets": [{"ref": ref}], "init_from": start})
        )
        (path / "model.safetensors").write_text(ref)  # weights of their own: two identities
    held = [
        {"id": f"h{n}", "problem": f"What is {n} + {n}?", "answer": str(2 * n)} for n in range(4)
    ]
    (tmp_path / "held.jsonl").write_text("".join(json.dumps(r) + "\n" for r in held))

    def reply(user: str, sample: int) -> str:
        n = int(user.split()[2])
        return f"\\boxed{{{2 * n if n < 3 else -1}}}"

    with ScriptedServer({str(rl): reply, str(sft): lambda u, s: "\\boxed{-1}"}) as server:
        for model in (str(sft), str(rl)):
            evaluate(
                lake, model, [str(tmp_path / "held.jsonl")], backend="openai",
                backend_options=openai(server), overrides={"k": 1},
            )  # fmt: skip
    data = gather_report(lake, "math_sft@1")
    assert [(e.model, e.score.benchmark, e.score.avg) for e in data.evaluations] == [
        (str(rl), "held", 0.75),  # trained on other@1, starting from the model trained on it
        (str(sft), "held", 0.0),
    ]
    html = render_report(data)
    assert "Models trained on this data" in html and "75.0" in html
    assert gather_report(lake, "other@1").evaluations[0].model == str(rl)  # not the SFT model
    assert len(gather_report(lake, "other@1").evaluations) == 1
