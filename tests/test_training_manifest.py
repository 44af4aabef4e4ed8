"""Training manifests: the shipped ones validate, bad ones fail naming the field, and data
hashes are enforced (plain files and lake versions) once, before any stage trains.

No training happens here (hash and stage-type checks run before any model is built).
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from cli.console import CascadeError
from lake.catalog import Lake
from schemas.training_manifest import GRPOStage, RewardModelStage, SFTStage
from training.datasets import DataHashError, load, verify
from training.runner import ManifestError, load_manifest, run_cascade
from training.sft_data import conversations


def load_verified(ref, where, manifest_dir, lake_path):
    return load(verify(ref, where, manifest_dir, lake_path))


ROOT = Path(__file__).resolve().parents[1]
GSM8K = ROOT.parent / "shared" / "data" / "sources" / "gsm8k_train.jsonl"


def sft_stage(ref: str, sha: str, name: str = "sft1") -> dict:
    return {
        "name": name,
        "type": "sft",
        "datasets": [{"ref": ref, "content_hash": sha}],
        "max_seq_len": 256,
        "max_steps": 2,
        "optimizer": {"learning_rate": 1e-3},
        "batch": {"global_batch_size": 2, "micro_batch_size": 1},
        "deepspeed": {"zero_stage": 0, "bf16": False},
    }


def manifest_dict(*stages: dict) -> dict:
    return {
        "name": "t",
        "base_model": "tiny-random:qwen2",
        "tokenizer": "in-process-bpe:300",
        "output_dir": "out",
        "stages": list(stages),
    }


def write(path: Path, spec: dict) -> Path:
    path.write_text(json.dumps(spec, indent=2))
    return path


def test_cascade_8b_manifest_has_the_papers_structure() -> None:
    m = load_manifest(ROOT / "manifests" / "cascade_8b.json")
    assert m.base_model == "Qwen/Qwen3-8B-Base"
    assert [s.name for s in m.stages] == [
        "sft_stage1",
        "sft_stage2",
        "reward_model",
        "rlhf",
        "if_rl_ifeval",
        "if_rl_ifbench",
        "math_rl_24k",
        "math_rl_32k",
        "math_rl_40k",
        "code_rl",
        "swe_rl_16k",
        "swe_rl_24k",
    ]
    s1, s2 = m.stages[0], m.stages[1]
    assert isinstance(s1, SFTStage) and isinstance(s2, SFTStage)
    assert (s1.max_seq_len, s2.max_seq_len, s1.epochs, s2.epochs) == (16384, 32768, 1, 1)
    assert s2.optimizer.learning_rate == 2e-5
    ups = {d.ref.split("@")[0]: d.upsample for d in s2.datasets}
    assert ups["sft_science_s2"] == 2
    assert [v for k, v in ups.items() if k.startswith("swe_sft")] == [3, 3, 3]
    # The reward model (recipe 5.1): Qwen2.5-72B-Instruct, HelpSteer2 + HelpSteer3 +
    # off-topic pairs, batch 256, LR 2e-6, 1 epoch; RLHF is scored by it.
    rm = m.stages[2]
    assert isinstance(rm, RewardModelStage)
    assert (rm.backbone, rm.batch.global_batch_size, rm.optimizer.learning_rate, rm.epochs) == (
        "Qwen/Qwen2.5-72B-Instruct",
        256,
        2e-6,
        1,
    )
    assert [d.ref for d in rm.datasets] == [
        "helpsteer2_pairs@1",
        "helpsteer3_pairs@1",
        "rm_offtopic_pairs@1",
    ]
    assert m.stage("rlhf").reward_model == "stage:reward_model"
    # The RL stages carry the recipe's numbers (sections 7.2-7.4), one row per stage:
    # prompts x rollouts, temperature, top-p, top-k, LR, max response, overlong filtering,
    # max steps, thinking share, reward, code-switch reward, dynamic filtering.
    rl = {s.name: s for s in m.stages[3:]}
    assert all(isinstance(s, GRPOStage) for s in rl.values())
    got = {
        name: (
            s.batch.prompts_per_step,
            s.batch.rollouts_per_prompt,
            s.temperature,
            s.top_p,
            s.top_k,
            s.optimizer.learning_rate,
            s.max_response_len,
            s.overlong_filtering,
            s.max_steps,
            s.thinking_fraction,
            s.reward,
            s.code_switch_reward,
            s.dynamic_filtering,
        )
        for name, s in rl.items()
    }
    math_rl = (128, 8, 1.0, 0.95, None, 2e-6)
    tail = (1.0, "math_verifier", -1.0, "epoch")
    assert got == {
        "rlhf": (128, 8, 0.6, 0.95, None, 2e-6, 12288, False, 800, 0.5, "reward_model")
        + ("batch_min_minus_10", "none"),
        "if_rl_ifeval": (128, 8, 0.6, 0.95, 20, 2e-6, 8192, False, 2000, 0.0, "if_verifier")
        + (None, "batch"),
        "if_rl_ifbench": (128, 8, 0.6, 0.95, 20, 2e-6, 8192, False, 1000, 0.0, "if_verifier")
        + (None, "batch"),
        "math_rl_24k": (*math_rl, 24576, True, 200, *tail),
        "math_rl_32k": (*math_rl, 32768, False, 200, *tail),
        "math_rl_40k": (*math_rl, 40960, False, 200, *tail),
        "code_rl": (128, 8, 1.0, 0.95, None, 4e-6, 49152, False, 90, 1.0, "code_tests")
        + (0.0, "none"),
        "swe_rl_16k": (128, 16, 1.0, 1.0, None, 2.5e-6, 16384, True, 30, 1.0)
        + ("swe_patch_judge", None, "none"),
        "swe_rl_24k": (128, 16, 1.0, 1.0, None, 2.5e-6, 16384, True, 30, 1.0)
        + ("swe_patch_judge", None, "none"),
    }
    # SWE RL's semantic reward: P(YES) of Kimi-Dev-72B, its server named by an env variable.
    judges = {(s.patch_judge.base_url, s.patch_judge.model) for s in m.stages[-2:]}
    assert judges == {("env:CASCADE_PATCH_JUDGE_URL", "moonshotai/Kimi-Dev-72B")}
    assert all(
        (s.kl_coef, s.entropy_coef, s.loss_level, s.reward_shaping) == (0, 0, "token", "none")
        for s in rl.values()
    )
    # Length curriculum (7.4: 100-200 steps per phase, until the clip ratio reaches ~10%):
    # at least 100 steps, then end once the smoothed share of cut responses is <= 10%.
    phases = ("math_rl_24k", "math_rl_32k", "math_rl_40k")
    assert [
        (c.truncated_share, c.min_steps, c.smoothing_steps, rl[n].max_steps)
        for n in phases
        if (c := rl[n].length_curriculum) is not None
    ] == [(0.1, 100, 10, 200)] * 3
    assert all(rl[n].length_curriculum is None for n in rl if n not in phases)
    assert all(s.no_signal_patience == 5 for s in rl.values())
    assert [rl["swe_rl_16k"].max_prompt_len, rl["swe_rl_24k"].max_prompt_len] == [16384, 24576]
    assert (rl["if_rl_ifeval"].readmit_hard, rl["math_rl_24k"].readmit_easy) == (0.1, 0.01)


def test_demo_manifest_validates() -> None:
    m = load_manifest(ROOT / "manifests" / "demo_tiny.json")
    assert m.base_model.startswith("tiny-random:")
    assert [s.type for s in m.stages] == ["sft", "sft", "grpo"]


def test_invalid_manifest_errors_name_each_field(tmp_path: Path) -> None:
    spec = json.loads((ROOT / "manifests" / "cascade_8b.json").read_text())
    bad = copy.deepcopy(spec)
    bad["stages"][1]["batch"]["micro_batch_size"] = 0
    bad["stages"][4]["temperature"] = -1
    bad["stages"][0]["datasets"][0]["ref"] = "not a ref"
    bad["stages"][3]["learning_rate"] = 1e-6  # belongs under optimizer
    bad["stages"][6]["datasets"][0]["content_hash"] = "abc"
    bad["stages"][2]["heldout_fraction"] = 1.5
    bad["stages"][7]["length_curriculum"]["min_steps"] = 300  # more than max_steps 200
    path = write(tmp_path / "bad.json", bad)
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    msg = str(info.value)
    for field in (
        "stages[1](sft_stage2).batch.micro_batch_size: Input should be greater than 0",
        "stages[4](if_rl_ifeval).temperature: Input should be greater than 0",
        "stages[0](sft_stage1).datasets[0].ref:",
        "stages[3](rlhf).learning_rate: Extra inputs are not permitted",
        "stages[6](math_rl_24k).datasets[0].content_hash: Value error, expected 64 lowercase hex",
        "stages[2](reward_model).heldout_fraction: Input should be less than 1",
        "stages[7](math_rl_32k): Value error, length_curriculum.min_steps 300 exceeds max_steps",
    ):
        assert f"{path}: {field}" in msg, msg


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda s: s["stages"][0].update(type="ppo"), "stages[0](sft1)"),
        (lambda s: s["stages"][0].pop("max_steps"), "give epochs or max_steps"),
        (lambda s: s["stages"].append(dict(s["stages"][0])), "stage names must be unique"),
        (
            lambda s: s["stages"][0]["batch"].update(global_batch_size=3, micro_batch_size=2),
            "not a multiple",
        ),
        (lambda s: s["stages"][0]["deepspeed"].update(offload_params=True), "zero_stage 3"),
        (lambda s: s.update(tokenizer=None), "needs an explicit tokenizer"),
        (lambda s: s.update(base_model="tiny-random:gpt9"), "base_model: Value error"),
    ],
)
def test_more_invalid_manifests(tmp_path: Path, edit, field: str) -> None:
    spec = manifest_dict(sft_stage("d.jsonl", "0" * 64))
    edit(spec)
    with pytest.raises(ManifestError) as info:
        load_manifest(write(tmp_path / "m.json", spec))
    assert field in str(info.value)


def test_broken_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text('{\n  "name": "x",\n  "stages": [,]\n}\n')
    with pytest.raises(ManifestError, match=r"m.json:3: invalid JSON"):
        load_manifest(path)


def test_wrong_file_hash_refuses_before_training(tmp_path: Path) -> None:
    data = tmp_path / "chat.jsonl"
    data.write_text(
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "hello"},
                ]
            }
        )
        + "\n"
    )
    good = hashlib.sha256(data.read_bytes()).hexdigest()
    wrong = ("1" if good[0] != "1" else "2") + good[1:]
    path = write(
        tmp_path / "m.json",
        manifest_dict(
            sft_stage("chat.jsonl", good, "first"), sft_stage("chat.jsonl", wrong, "second")
        ),
    )
    with pytest.raises(DataHashError) as info:
        run_cascade(path, say=lambda _: None)
    msg = str(info.value)
    assert "stages[second].datasets[0]" in msg and str(data) in msg
    assert good in msg and wrong in msg
    assert not (tmp_path / "out").exists()  # nothing trained, not even the first stage


def test_lake_reference_is_checked_against_the_recorded_content_hash(tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake")
    rows = [
        {
            "messages": [
                {"role": "user", "content": "What is 2+3?"},
                {"role": "assistant", "content": "5", "reasoning": "2+3=5"},
            ]
        },
        {
            "messages": [
                {"role": "user", "content": "Say hi"},
                {"role": "assistant", "content": "hi", "reasoning": None},
            ]
        },
    ]
    info = lake.commit("sft_demo", pa.Table.from_pylist(rows), kind="generic", producer="test")
    ref = sft_stage(f"sft_demo@{info.version}", info.content_hash)["datasets"][0]
    from schemas.training_manifest import DatasetRef

    verified = load_verified(
        DatasetRef(**ref), "stages[sft1].datasets[0]", tmp_path, tmp_path / "lake"
    )
    convs = list(conversations(verified))
    assert [c.mode for c in convs] == ["think", "no_think"]
    assert convs[0].messages[1].reasoning == "2+3=5"

    tampered = DatasetRef(**{**ref, "content_hash": "f" * 64})
    with pytest.raises(DataHashError, match=r"stages\[sft1\].datasets\[0\]: sft_demo@1: content"):
        load_verified(tampered, "stages[sft1].datasets[0]", tmp_path, tmp_path / "lake")
    # Corrupting the stored Parquet bytes is caught too, even with the recorded hash.
    parquet = Path(lake.files(f"sft_demo@{info.version}")[0])
    parquet.chmod(0o644)
    parquet.write_bytes(parquet.read_bytes()[:-1] + b"\x00")
    with pytest.raises(DataHashError, match="does not match"):
        load_verified(DatasetRef(**ref), "stages[sft1].datasets[0]", tmp_path, tmp_path / "lake")


def test_cli_reports_manifest_errors_as_one_message(tmp_path: Path) -> None:
    from cli.main import command_app

    app = command_app()
    path = write(tmp_path / "m.json", manifest_dict(sft_stage("d.jsonl", "xyz")))
    result = CliRunner().invoke(app, ["train", "--manifest", str(path)])
    assert isinstance(result.exception, CascadeError)
    assert "stages[0](sft1).datasets[0].content_hash" in str(result.exception)


def test_row_errors_name_the_row(tmp_path: Path) -> None:
    data = tmp_path / "chat.jsonl"
    good = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}
    bad = {"messages": [{"role": "robot", "content": "a"}]}
    data.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    from schemas.training_manifest import DatasetRef

    sha = hashlib.sha256(data.read_bytes()).hexdigest()
    verified = load_verified(DatasetRef(ref="chat.jsonl", content_hash=sha), "x", tmp_path, None)
    with pytest.raises(ValueError, match=r"chat.jsonl row 1: message 0 has role 'robot'"):
        list(conversations(verified))


def test_gsm8k_file_with_prompt_columns_becomes_chats() -> None:
    from schemas.training_manifest import DatasetRef

    sha = hashlib.sha256(GSM8K.read_bytes()).hexdigest()
    ref = DatasetRef(
        ref=str(GSM8K),
        content_hash=sha,
        limit=5,
        prompt_column="question",
        response_column="answer",
        mode="no_think",
    )
    convs = list(conversations(load_verified(ref, "x", ROOT, None)))
    assert len(convs) == 5 and all(c.mode == "no_think" for c in convs)
    assert "####" in convs[0].messages[1].content


def test_generations_layout_prompt_messages_plus_reply_columns(tmp_path: Path) -> None:
    """A `generations`-style table: prompt chat as JSON, reply split into reasoning/answer."""
    from schemas.training_manifest import DatasetRef

    lake = Lake(tmp_path / "lake")
    prompt = json.dumps(
        [{"role": "system", "content": "Be exact."}, {"role": "user", "content": "2+3?"}]
    )
    rows = [
        {"messages": prompt, "reasoning": "2+3=5", "answer": "5", "mode": "think"},
        {"messages": prompt, "reasoning": None, "answer": "5", "mode": "no_think"},
        {"messages": prompt, "reasoning": None, "answer": "5", "mode": "thinking"},
    ]
    info = lake.commit("gens", pa.Table.from_pylist(rows), kind="generic", producer="test")
    ref = DatasetRef(
        ref="gens@1",
        content_hash=info.content_hash,
        response_column="answer",
        reasoning_column="reasoning",
        mode_column="mode",
    )
    convs = conversations(load_verified(ref, "x", tmp_path, tmp_path / "lake"))
    first, second = next(convs), next(convs)
    assert [m.role for m in first.messages] == ["system", "user", "assistant"]
    assert (first.mode, first.messages[-1].reasoning, first.messages[-1].content) == (
        "think",
        "2+3=5",
        "5",
    )
    assert (second.mode, second.messages[-1].reasoning) == ("no_think", None)
    # One spelling of a mode: the old `thinking` / `non_thinking` are refused, naming the row.
    with pytest.raises(ValueError, match=r"lake:gens@1 row 2: mode is 'thinking'"):
        next(convs)
