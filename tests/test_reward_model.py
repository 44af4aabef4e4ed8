"""The reward-model stage: manifest checks, preference rows -> pairs (bad rows named), the
held-out split by prompt_id, the Bradley-Terry loss as logged against the formula, micro
batching and ZeRO stages that agree, padding that does not move a score, evaluation per source
and category on a lake `preference_pairs` table, exact resume after a kill, and two ranks that
match one.

Models are tiny random Qwen2 sequence classifiers with an in-process BPE; data is toy-world
preference pairs (tests/test_reward_model_toy.py) and hand-made rows.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from test_reward_model_toy import toy_preference_rows, write_jsonl

from builders.worlds.toy_world import toy_problems
from lake.catalog import Lake
from schemas.chat_template import ChatFormatError
from schemas.training_manifest import DatasetRef, RewardModelStage
from training.datasets import load, verify
from training.models import load_tokenizer
from training.pair_data import PairStream, is_heldout, load_pairs, render_exchange, stage_pairs
from training.reward_model import pair_scores, read_eval, reward_backbone
from training.runner import ManifestError, load_manifest, run_cascade
from training.step_log import read_log

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]
CLI = [
    sys.executable,
    "-c",
    "import sys; from cli.main import main; sys.argv[0] = 'cascade'; main()",
]
GROUP_ENV = {"MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE"}


def rm_stage(datasets: list[dict], **extra: object) -> dict:
    return {
        "name": "rm",
        "type": "reward_model",
        "backbone": "tiny-random:qwen2",
        "backbone_overrides": {
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 256,
        },
        "tokenizer": "in-process-bpe:300",
        "datasets": datasets,
        "max_seq_len": 96,
        "max_steps": 3,
        "heldout_fraction": 0.25,
        "eval_micro_batch_size": 7,
        "optimizer": {"learning_rate": 3e-3, "schedule": "constant"},
        "batch": {"global_batch_size": 8, "micro_batch_size": 8},
        "deepspeed": {"zero_stage": 0, "bf16": False},
        "gradient_checkpointing": False,
        "checkpoint_every_steps": 100,
        "seed": 3,
        **extra,
    }


def manifest(tmp_path: Path, stages: list[dict], out: str = "run") -> Path:
    spec = {
        "name": "rm_test",
        "base_model": "tiny-random:qwen2",
        "tokenizer": "in-process-bpe:300",
        "attn_implementation": "sdpa",
        "output_dir": out,
        "stages": stages,
    }
    path = tmp_path / f"{out}.json"
    path.write_text(json.dumps(spec, indent=2))
    return path


def toy_pairs_file(tmp_path: Path, problems: int = 40, name: str = "pairs.jsonl") -> dict:
    rows = toy_preference_rows(toy_problems(problems, seed=5, digits=(1, 2)), 2, seed=5)
    sha = write_jsonl(tmp_path / name, rows)
    return {"ref": name, "content_hash": sha}


# ------------------------------------------------------------------ manifest -----------------


@pytest.mark.parametrize(
    "module",
    [
        "training.pair_data",
        "training.reward_model",
        "training.reward_clients",
        "curation.verify.reward_model_score",
        "training.reward_server",
        "training.datasets",
        "schemas.training_manifest",
    ],
)
def test_docstring_examples(module: str) -> None:
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.pop("tokenizer"), "a tiny-random backbone needs an explicit tokenizer"),
        (lambda s: s["datasets"][0].update(response_column="x"), "response_column is for SFT"),
        (lambda s: s.update(heldout_fraction=1.0), "heldout_fraction: Input should be less than 1"),
        (
            lambda s: s.update(backbone="stage:nowhere", backbone_overrides=None),
            "stages\\[0\\] backbone 'stage:nowhere' names no earlier policy stage",
        ),
        (lambda s: s.update(backbone="Qwen/x"), "backbone_overrides only applies"),
    ],
)
def test_reward_model_stage_errors_name_the_field(tmp_path: Path, edit, message: str) -> None:
    stage = rm_stage([{"ref": "p.jsonl", "content_hash": "0" * 64}])
    edit(stage)
    with pytest.raises(ManifestError, match=message):
        load_manifest(manifest(tmp_path, [stage]))


def test_grpo_reward_model_stage_reference_must_name_an_earlier_reward_model(
    tmp_path: Path,
) -> None:
    sft = {
        "name": "sft",
        "type": "sft",
        "datasets": [{"ref": "c.jsonl", "content_hash": "0" * 64}],
        "max_seq_len": 64,
        "max_steps": 1,
        "optimizer": {"learning_rate": 1e-3},
        "batch": {"global_batch_size": 1, "micro_batch_size": 1},
    }
    grpo = {
        "name": "rlhf",
        "type": "grpo",
        "datasets": [{"ref": "p.jsonl", "content_hash": "0" * 64}],
        "optimizer": {"learning_rate": 1e-6},
        "batch": {"prompts_per_step": 1, "rollouts_per_prompt": 2},
        "reward": "reward_model",
        "reward_model": "stage:sft",
        "max_steps": 1,
        "temperature": 1.0,
        "max_response_len": 8,
        "overlong_filtering": False,
    }
    with pytest.raises(ManifestError, match=r"'stage:sft' names no earlier reward_model stage"):
        load_manifest(manifest(tmp_path, [sft, grpo]))
    rm = rm_stage([{"ref": "p.jsonl", "content_hash": "0" * 64}], backbone="stage:sft")
    del rm["backbone_overrides"], rm["tokenizer"]
    spec = load_manifest(manifest(tmp_path, [sft, rm, {**grpo, "reward_model": "stage:rm"}]))
    assert [s.type for s in spec.stages] == ["sft", "reward_model", "grpo"]


# ------------------------------------------------------------------ pairs ---------------------


def loaded(tmp_path: Path, rows: list[dict], **ref: object):
    sha = write_jsonl(tmp_path / "rows.jsonl", rows)
    return load(verify(DatasetRef(ref="rows.jsonl", content_hash=sha, **ref), "x", tmp_path, None))


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"messages": "[]", "chosen": "a", "rejected": "b"}, "row 1: prompt is not a non-empty"),
        (
            {"messages": [{"role": "assistant", "content": "hi"}], "chosen": "a", "rejected": "b"},
            "row 1: prompt ends with a assistant turn",
        ),
        ({"messages": "[{", "chosen": "a", "rejected": "b"}, "row 1: messages is not JSON"),
        ({"problem": "q", "chosen": "a", "rejected": "b"}, "row 1: no 'messages' column"),
        ({"messages": [{"role": "user", "content": "q"}], "chosen": "a"}, "'rejected' is missing"),
        (
            {"messages": [{"role": "user", "content": "q"}], "chosen": "a", "rejected": "a"},
            "row 1: chosen and rejected are the same text",
        ),
    ],
)
def test_bad_preference_rows_are_named(tmp_path: Path, row: dict, message: str) -> None:
    good = {"messages": [{"role": "user", "content": "q"}], "chosen": "a", "rejected": "b"}
    with pytest.raises(ChatFormatError, match=message):
        load_pairs(loaded(tmp_path, [good, row]))


def test_pairs_default_their_provenance_and_read_prompt_columns(tmp_path: Path) -> None:
    rows = [
        {"q": "What is 1 + 1?", "chosen": "2", "rejected": "3"},
        {"q": "What is 1 + 1?", "chosen": "2", "rejected": "4", "source": "hs3", "category": "m"},
    ]
    a, b = load_pairs(loaded(tmp_path, rows, prompt_column="q"))
    assert (a.source, a.category, b.source, b.category) == ("rows", None, "hs3", "m")
    assert a.prompt_id == b.prompt_id and len(a.prompt_id) == 64  # hash of the same context
    assert [m.role for m in a.messages] == ["user"]


def test_held_out_split_is_by_prompt_and_stable() -> None:
    ids = [f"prompt-{i}" for i in range(4000)]
    held = [p for p in ids if is_heldout(p, 7, 0.1)]
    assert 0.08 < len(held) / len(ids) < 0.12
    assert held == [p for p in ids[::-1] if is_heldout(p, 7, 0.1)][::-1]  # order-free
    assert held != [p for p in ids if is_heldout(p, 8, 0.1)]  # the seed matters
    assert set(held) < {p for p in ids if is_heldout(p, 7, 0.2)}  # a larger share grows it


def test_render_exchange_is_the_tokenizers_chat_template() -> None:
    from training.models import train_bpe_tokenizer

    tokenizer = train_bpe_tokenizer(["What is 2 + 3? 5"], 300)
    text = render_exchange(tokenizer, [{"role": "user", "content": "What is 2 + 3?"}], "5")
    assert (
        text
        == "<|im_start|>user\nWhat is 2 + 3? /think<|im_end|>\n<|im_start|>assistant\n5<|im_end|>\n"
    )


# ------------------------------------------------------------------ training -----------------


def test_logged_loss_is_the_bradley_terry_formula_and_micro_batching_does_not_change_it(
    tmp_path: Path,
) -> None:
    data = toy_pairs_file(tmp_path)
    runs = {
        "whole": {},
        "split_zero2": {
            "batch": {"global_batch_size": 8, "micro_batch_size": 2},
            "deepspeed": {"zero_stage": 2, "bf16": False},
        },
    }
    logs = {}
    for name, extra in runs.items():
        path = manifest(tmp_path, [rm_stage([data], **extra)], out=name)
        run_cascade(path, say=lambda _: None)
        logs[name] = read_log(tmp_path / name / "rm")
    whole, split = logs["whole"], logs["split_zero2"]
    assert [r["step"] for r in whole] == [0, 1, 2, 3]
    for a, b in zip(whole[1:], split[1:], strict=True):  # the same gradient every step
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4)
        assert a["accuracy"] == b["accuracy"]

    # step 1's loss from scratch: the same init, the same first global batch, the formula
    stage = RewardModelStage.model_validate(rm_stage([data]))
    tokenizer = load_tokenizer(str(tmp_path / "whole" / "rm" / "tokenizer"))
    dataset = load(verify(DatasetRef(**data), "x", tmp_path, None))
    pairs = stage_pairs(stage, [dataset], tokenizer)
    model = reward_backbone(stage, stage.backbone, len(tokenizer), tokenizer.pad_token_id, "sdpa")
    batch = [pairs.train[i] for i in PairStream(len(pairs.train), stage).global_batch(0)]
    with torch.no_grad():
        chosen, rejected = pair_scores(model, batch, tokenizer.pad_token_id, torch.device("cpu"))
    expected = float(-F.logsigmoid(chosen - rejected).mean())
    assert whole[1]["loss"] == pytest.approx(expected, rel=1e-5)
    assert whole[1]["accuracy"] == float((chosen > rejected).float().mean())


def test_padding_does_not_move_a_score(tmp_path: Path) -> None:
    data = toy_pairs_file(tmp_path)
    stage = RewardModelStage.model_validate(rm_stage([data]))
    from training.models import train_bpe_tokenizer

    tokenizer = train_bpe_tokenizer(["What is 12 + 3? \\boxed{15}"], 300)
    dataset = load(verify(DatasetRef(**data), "x", tmp_path, None))
    pairs = stage_pairs(stage, [dataset], tokenizer).train
    model = reward_backbone(stage, stage.backbone, len(tokenizer), tokenizer.pad_token_id, "sdpa")
    cpu = torch.device("cpu")
    with torch.no_grad():
        together = pair_scores(model, pairs[:6], tokenizer.pad_token_id, cpu)
        alone = [pair_scores(model, [p], tokenizer.pad_token_id, cpu) for p in pairs[:6]]
    assert len({p.length for p in pairs[:6]}) > 1  # the batch really is padded
    for i, (c, r) in enumerate(alone):
        assert together[0][i].item() == pytest.approx(c.item(), abs=1e-5)
        assert together[1][i].item() == pytest.approx(r.item(), abs=1e-5)


def preference_table(rows: list[dict]) -> pa.Table:
    """Rows in the `preference_pairs` contract (schemas/preferences.py)."""
    from schemas.preferences import PREFERENCE_PAIRS

    full = [
        {
            "uid": f"u{i}",
            "prompt_uid": f"p{i}",
            "source_rows": [f"s{i}"],
            "method": "signed_preference",
            "prompt": json.loads(r["messages"])[-1]["content"],
            "margin": 1.0,
            "metadata": "{}",
            **r,
        }
        for i, r in enumerate(rows)
    ]
    return pa.Table.from_pylist(full, schema=PREFERENCE_PAIRS.schema)


def test_evaluation_per_source_and_category_from_a_lake_table(tmp_path: Path) -> None:
    rows = toy_preference_rows(toy_problems(60, seed=9, digits=(1, 2)), 2, seed=9)
    for i, row in enumerate(rows):
        row["source"] = "helpsteer3" if i % 3 else "offtopic"
    lake = Lake(tmp_path / "lake")
    info = lake.commit("toy_pairs", preference_table(rows), kind="preference_pairs", producer="t")
    data = toy_pairs_file(tmp_path, problems=20, name="more.jsonl")
    stage = rm_stage(
        [{"ref": f"toy_pairs@{info.version}", "content_hash": info.content_hash}, data]
    )
    path = manifest(tmp_path, [stage])
    run_cascade(path, lake_path=tmp_path / "lake", say=lambda _: None)
    final = tmp_path / "run" / "rm" / "final"
    result = read_eval(final)
    log = read_log(tmp_path / "run" / "rm")
    heldout = [r for r in rows if is_heldout(r["prompt_id"], 0, 0.25)]
    assert set(result["by_source"]) == {"helpsteer3", "offtopic", "toy_world"}
    assert result["by_source"]["offtopic"]["pairs"] == sum(
        r["source"] == "offtopic" for r in heldout
    )
    assert sum(c["pairs"] for c in result["by_category"].values()) == result["pairs"]
    assert (result["step"], result["heldout_fraction"]) == (3, 0.25)
    assert log[0]["step"] == 0 and "eval_accuracy" in log[0]  # before training
    assert log[-1]["eval_by_source"] == result["by_source"]  # after, the same numbers
    trained_on = json.loads((final / "trained_on.json").read_text())
    assert trained_on["heldout_pairs"] == result["pairs"]
    assert trained_on["datasets"][0]["location"] == "lake:toy_pairs@1"
    # the final dir is a transformers reward model with its tokenizer and chat template
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    assert AutoModelForSequenceClassification.from_pretrained(final).config.num_labels == 1
    assert AutoTokenizer.from_pretrained(final).chat_template


# ------------------------------------------------------------------ resume, ranks ------------


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in GROUP_ENV}
    return {**env, "OMP_NUM_THREADS": "1", **extra}


def _train(path: Path, *extra: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [*CLI, "train", "--manifest", str(path), "--no-progress", *extra],
        cwd=ROOT,
        env=clean_env(**(env or {})),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.slow
def test_reward_model_resume_after_kill_is_exact(tmp_path: Path) -> None:
    data = toy_pairs_file(tmp_path, problems=60)
    stage = {"max_steps": 6, "checkpoint_every_steps": 2, "eval_every_steps": 3}
    straight = manifest(tmp_path, [rm_stage([data], **stage)], out="straight")
    killed = manifest(tmp_path, [rm_stage([data], **stage)], out="killed")
    proc = _train(straight)
    victim = _train(killed, env={"CASCADE_TRAIN_STEP_DELAY_S": "0.5"})
    marker = tmp_path / "killed" / "rm" / "checkpoints" / "step_0000002" / "COMPLETE"
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert victim.poll() is None, victim.stdout.read()
        assert time.monotonic() < deadline, "no checkpoint after 120 s"
        time.sleep(0.05)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    assert not (tmp_path / "killed" / "rm" / "final").exists()
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out
    resumed = _train(killed, "--resume")
    out, _ = resumed.communicate(timeout=180)
    assert resumed.returncode == 0, out

    a, b = read_log(tmp_path / "straight" / "rm"), read_log(tmp_path / "killed" / "rm")
    assert [r["step"] for r in b] == [0, 1, 2, 3, 4, 5, 6]
    for ra, rb in zip(a, b, strict=True):
        keys = ("loss", "lr", "grad_norm", "accuracy", "eval_accuracy", "eval_margin_mean")
        assert [ra.get(k) for k in keys] == [rb.get(k) for k in keys]
    assert read_eval(tmp_path / "straight" / "rm" / "final") == read_eval(
        tmp_path / "killed" / "rm" / "final"
    )
    wa = load_file(tmp_path / "straight" / "rm" / "final" / "model.safetensors")
    wb = load_file(tmp_path / "killed" / "rm" / "final" / "model.safetensors")
    assert wa.keys() == wb.keys() and "score.weight" in wa
    for key in wa:
        assert torch.equal(wa[key], wb[key]), key


@pytest.mark.slow
def test_reward_model_on_two_ranks_with_zero3_matches_one(tmp_path: Path) -> None:
    from test_training_distributed import assert_same_weights, train

    data = toy_pairs_file(tmp_path, problems=50)
    # global 8 pairs = micro 2 x accumulation (4 or 2) x ranks (1 or 2); the held-out pairs
    # make an odd number of eval chunks of 7, so one rank runs a spare forward to keep ZeRO-3's
    # parameter gathering in step
    extra = {"batch": {"global_batch_size": 8, "micro_batch_size": 2}}
    extra["deepspeed"] = {"zero_stage": 3, "bf16": False}
    one = manifest(tmp_path, [rm_stage([data], **extra)], out="one")
    two = manifest(tmp_path, [rm_stage([data], **extra)], out="two")
    train(one)
    train(two, ranks=2)
    a, b = read_log(tmp_path / "one" / "rm"), read_log(tmp_path / "two" / "rm")
    assert [r["step"] for r in a] == [r["step"] for r in b] == [0, 1, 2, 3]
    for ra, rb in zip(a[1:], b[1:], strict=True):
        assert ra["loss"] == pytest.approx(rb["loss"], rel=1e-4)
    for ra, rb in [(a[0], b[0]), (a[-1], b[-1])]:  # evaluated before and after training
        assert ra["eval_accuracy"] == rb["eval_accuracy"]
        assert ra["eval_margin_mean"] == pytest.approx(rb["eval_margin_mean"], abs=1e-3)
        assert ra["eval_pairs"] == rb["eval_pairs"] and -(-ra["eval_pairs"] // 7) % 2 == 1
    assert (
        read_eval(tmp_path / "one" / "rm" / "final")["pairs"]
        == read_eval(tmp_path / "two" / "rm" / "final")["pairs"]
    )
    assert_same_weights(tmp_path / "one" / "rm" / "final", tmp_path / "two" / "rm" / "final")
