"""SFT trainer: chat template and loss mask, packing isolation, DeepSpeed training and resume.

Real data: GSM8K train questions; the worked solution becomes `<think>` reasoning and the
number after `####` the answer (even rows thinking, odd rows non-thinking). Model: a random
2-layer, hidden-64 Qwen2 with a ~500-token BPE trained in-process.

DeepSpeed (gloo, CPU) is used by test_loss_goes_down_with_deepspeed_zero2 and
test_zero_stages_agree_and_final_model_records_provenance (and test_training_resume.py).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from schemas.chat_template import (
    IGNORE_INDEX,
    IM_END,
    Message,
    parse_messages,
    render_text,
    tokenize_chat,
)
from training.models import build_model, train_bpe_tokenizer
from training.packing import collate, pack_best_fit
from training.runner import run_cascade
from training.sft import token_losses

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]
GSM8K = ROOT.parent / "shared" / "data" / "sources" / "gsm8k_train.jsonl"


def gsm8k_chats(n: int, offset: int = 0) -> list[dict]:
    """The first `n` GSM8K rows (from `offset`) as chat rows with a `messages` column."""
    rows = []
    with open(GSM8K) as fh:
        for i, line in enumerate(fh):
            if i < offset:
                continue
            if len(rows) == n:
                break
            item = json.loads(line)
            solution, _, answer = item["answer"].rpartition("####")
            assistant = {"role": "assistant", "content": f"The answer is {answer.strip()}."}
            if i % 2 == 0:
                assistant["reasoning"] = solution.strip()
            rows.append({"messages": [{"role": "user", "content": item["question"]}, assistant]})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def chats() -> list[list[Message]]:
    return [parse_messages(r["messages"], f"gsm8k row {i}") for i, r in enumerate(gsm8k_chats(48))]


@pytest.fixture(scope="module")
def tokenizer(chats: list[list[Message]]):
    return train_bpe_tokenizer([render_text(c, "think") for c in chats], 500)


# ------------------------------------------------------------------ chat template ----------


def test_chatml_render_puts_flag_on_every_user_turn_and_think_block_only_when_thinking() -> None:
    conv = [
        Message("system", "Be brief."),
        Message("user", "Compute 17*23."),
        Message("assistant", "391", reasoning="17*23 = 340 + 51."),
        Message("user", "And 2+2?"),
        Message("assistant", "4"),
    ]
    assert render_text(conv, "think") == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nCompute 17*23. /think<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n17*23 = 340 + 51.\n</think>\n391<|im_end|>\n"
        "<|im_start|>user\nAnd 2+2? /think<|im_end|>\n"
        "<|im_start|>assistant\n4<|im_end|>\n"
    )
    plain = [Message("user", "Hi"), Message("assistant", "Hello")]
    text = render_text(plain, "no_think")
    assert "Hi /no_think<|im_end|>" in text and "<think>" not in text


def test_loss_mask_covers_exactly_the_assistant_tokens(tokenizer, chats) -> None:
    for conv in chats[:12] + [
        [
            Message("user", "a"),
            Message("assistant", "b"),
            Message("user", "c"),
            Message("assistant", "d", reasoning="e"),
        ]
    ]:
        mode = "think" if any(m.reasoning for m in conv) else "no_think"
        chat = tokenize_chat(tokenizer, conv, mode)
        assert tokenizer.decode(chat.input_ids) == render_text(conv, mode)
        # Contiguous target spans, decoded, are exactly the assistant replies + <|im_end|>.
        spans, current = [], []
        for tok, is_target in zip(chat.input_ids, chat.target_mask, strict=True):
            if is_target:
                current.append(tok)
            elif current:
                spans.append(tokenizer.decode(current))
                current = []
        expected = []
        for m in conv:
            if m.role == "assistant":
                reply = (
                    m.content
                    if m.reasoning is None
                    else (f"<think>\n{m.reasoning}\n</think>\n{m.content}")
                )
                expected.append(reply + IM_END)
        assert spans == expected
        # Labels predict the next token only where that token is a target.
        labels = chat.next_token_labels()
        n_targets = sum(chat.target_mask[1:])
        assert sum(lab != IGNORE_INDEX for lab in labels) == n_targets
        assert labels[-1] == IGNORE_INDEX


# ------------------------------------------------------------------ packing ----------------


def test_best_fit_packing_respects_capacity_and_keeps_every_sample() -> None:
    lengths = [300, 120, 500, 80, 260, 40, 510, 200, 90, 10]
    rows = pack_best_fit(lengths, 512)
    assert sorted(i for row in rows for i in row) == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in row) <= 512 for row in rows)
    assert len(rows) == 5  # 2110 tokens need at least 5 rows of 512
    with pytest.raises(ValueError, match="more than the row capacity"):
        pack_best_fit([600], 512)


def test_data_stream_epochs_reshuffle_and_cover_every_sample() -> None:
    import random

    from schemas.training_manifest import SFTStage
    from training.sft import DataStream

    stage = SFTStage.model_validate(
        {
            "name": "s",
            "type": "sft",
            "max_seq_len": 64,
            "epochs": 3,
            "datasets": [{"ref": "d.jsonl", "content_hash": "0" * 64}],
            "batch": {"global_batch_size": 2, "micro_batch_size": 1},
            "optimizer": {"learning_rate": 1.0},
        }
    )
    rng = random.Random(0)
    lengths = [rng.randint(5, 60) for _ in range(50)]
    stream = DataStream(lengths, stage)
    total = stream.total_steps()
    assert total == 3 * stream.steps_in_epoch(0)
    by_epoch: dict[int, list[tuple[int, ...]]] = {}
    for step in range(total):
        epoch, _ = stream.position(step)
        by_epoch.setdefault(epoch, []).extend(tuple(r) for r in stream.global_batch(step))
    assert sorted(by_epoch) == [0, 1, 2]
    for rows in by_epoch.values():
        flat = [i for row in rows for i in row]
        assert len(flat) == len(set(flat))  # no sample twice within an epoch
        assert all(sum(lengths[i] for i in row) <= 64 for row in rows)
    assert by_epoch[0] != by_epoch[1]  # a new order every epoch
    again = DataStream(lengths, stage)  # a fresh stream (a resumed run) sees the same batches
    assert [again.global_batch(s) for s in (total - 1, 0)] == [
        stream.global_batch(s) for s in (total - 1, 0)
    ]


@pytest.mark.parametrize(
    ("attn", "device"),
    [
        ("sdpa", "cpu"),
        ("eager", "cpu"),
        pytest.param(
            "flex_attention",
            "cuda",
            marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU"),
        ),
    ],
)
def test_packed_and_unpacked_per_token_losses_match(tokenizer, chats, attn, device) -> None:
    """Packed samples must not see each other, whatever the attention backend (flex_attention
    builds a document mask from the restarting positions; its CPU kernels are compiled per
    shape and not used by the trainer on CPU)."""
    samples = [
        tokenize_chat(tokenizer, c, "think" if c[-1].reasoning else "no_think") for c in chats[:16]
    ]
    model = build_model("tiny-random:qwen2", None, len(tokenizer), attn, seed=0).eval()
    model = model.to(device)
    pad = tokenizer.pad_token_id
    rows = pack_best_fit([len(s.input_ids) for s in samples], 1024)
    assert any(len(r) > 1 for r in rows)  # the test is only meaningful if samples share rows
    with torch.no_grad():
        packed = collate(rows, samples, pad).to(device)
        packed_losses = token_losses(model, packed)
        restarting = packed.position_ids.clone()
        packed.position_ids = torch.arange(packed.input_ids.shape[1], device=device).expand_as(
            restarting
        )
        leaky_losses = token_losses(model, packed)  # control: one long sequence per row
        for r, row in enumerate(rows):
            start = 0
            for i in row:
                alone = token_losses(model, collate([[i]], samples, pad).to(device))[0]
                n = len(samples[i].input_ids)
                torch.testing.assert_close(
                    packed_losses[r, start : start + n], alone, rtol=1e-5, atol=1e-5
                )
                start += n
    # Without restarting positions later samples see earlier ones: losses must differ.
    assert not torch.allclose(leaky_losses, packed_losses, atol=1e-3)


def test_auto_attention_is_flex_attention_on_a_gpu_without_flash_attn(monkeypatch) -> None:
    import sys
    import types

    from training.models import pick_attn_implementation

    monkeypatch.setitem(sys.modules, "flash_attn", None)  # `import flash_attn` fails
    assert pick_attn_implementation("auto", on_gpu=True) == "flex_attention"
    assert pick_attn_implementation("auto", on_gpu=False) == "sdpa"
    monkeypatch.setitem(sys.modules, "flash_attn", types.ModuleType("flash_attn"))
    assert pick_attn_implementation("auto", on_gpu=True) == "flash_attention_2"
    assert pick_attn_implementation("eager", on_gpu=True) == "eager"


def test_learning_rate_schedules_warm_up_then_decay_to_the_floor() -> None:
    from schemas.training_manifest import SFTStage
    from training.distributed import lr_lambda

    def stage(**opt: object) -> SFTStage:
        return SFTStage.model_validate(
            {
                "name": "s",
                "type": "sft",
                "max_seq_len": 8,
                "max_steps": 10,
                "datasets": [{"ref": "d.jsonl", "content_hash": "0" * 64}],
                "batch": {"global_batch_size": 1, "micro_batch_size": 1},
                "optimizer": {"learning_rate": 1.0, **opt},
            }
        )

    cosine = lr_lambda(
        stage(schedule="cosine", warmup_steps=4, min_learning_rate_ratio=0.1).optimizer, 104
    )
    assert [cosine(s) for s in range(4)] == pytest.approx([0.2, 0.4, 0.6, 0.8])
    assert cosine(4) == pytest.approx(1.0)
    assert cosine(54) == pytest.approx(0.55)  # halfway: floor + (1 - floor) / 2
    assert cosine(104) == pytest.approx(0.1)
    linear = lr_lambda(stage(schedule="linear", warmup_ratio=0.1).optimizer, 100)
    assert linear(10) == pytest.approx(1.0) and linear(55) == pytest.approx(0.5)
    constant = lr_lambda(stage(schedule="constant").optimizer, 100)
    assert {constant(s) for s in range(100)} == {1.0}


def test_packing_isolation_check_catches_a_backend_that_ignores_positions() -> None:
    from training.sft import check_packing_isolation

    model = build_model("tiny-random:qwen2", None, 500, "sdpa", seed=0)
    assert check_packing_isolation(model, torch.device("cpu"), 500, atol=1e-4) < 1e-4

    class IgnoresPositions(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, input_ids, position_ids, use_cache):
            return self.inner(input_ids=input_ids, use_cache=use_cache)

    with pytest.raises(RuntimeError, match="packed samples are not isolated"):
        check_packing_isolation(IgnoresPositions(), torch.device("cpu"), 500, atol=1e-4)


# ------------------------------------------------------------------ DeepSpeed runs ---------


def tiny_manifest(tmp_path: Path, data: Path, sha: str, out: str, **stage: object) -> Path:
    spec = {
        "name": "tiny",
        "base_model": "tiny-random:qwen2",
        "model_overrides": {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
        },
        "tokenizer": "in-process-bpe:500",
        "attn_implementation": "sdpa",
        "output_dir": out,
        "stages": [
            {
                "name": "sft1",
                "type": "sft",
                "datasets": [{"ref": data.name, "content_hash": sha}],
                "max_seq_len": 512,
                "max_steps": 10,
                "optimizer": {"learning_rate": 3e-3, "schedule": "cosine", "warmup_steps": 2},
                "batch": {"global_batch_size": 4, "micro_batch_size": 2},
                "deepspeed": {"zero_stage": 2, "bf16": False},
                "checkpoint_every_steps": 100,
                "gradient_checkpointing": True,
                "seed": 7,
                **stage,
            }
        ],
    }
    path = tmp_path / f"{out}.json"
    path.write_text(json.dumps(spec))
    return path


def read_log(stage_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (stage_dir / "log.jsonl").read_text().splitlines()]


def test_loss_goes_down_with_deepspeed_zero2(tmp_path: Path) -> None:
    data = tmp_path / "gsm8k_chat.jsonl"
    sha = write_jsonl(data, gsm8k_chats(40))
    manifest = tiny_manifest(tmp_path, data, sha, "run", max_steps=14)
    run_cascade(manifest, say=lambda _: None)
    log = read_log(tmp_path / "run" / "sft1")
    losses = [r["loss"] for r in log]
    assert [r["step"] for r in log] == list(range(1, 15))
    assert sum(losses[-3:]) / 3 < losses[0] - 1.0, losses
    assert all(r["useful_tokens"] <= r["tokens"] for r in log)


def test_zero_stages_agree_and_final_model_records_provenance(tmp_path: Path) -> None:
    data = tmp_path / "gsm8k_chat.jsonl"
    sha = write_jsonl(data, gsm8k_chats(16))
    logs, norms = {}, {}
    for zero in (0, 3):
        manifest = tiny_manifest(
            tmp_path,
            data,
            sha,
            f"z{zero}",
            max_steps=3,
            deepspeed={"zero_stage": zero, "bf16": False},
        )
        run_cascade(manifest, say=lambda _: None)
        logs[zero] = [r["loss"] for r in read_log(tmp_path / f"z{zero}" / "sft1")]
        norms[zero] = [r["grad_norm"] for r in read_log(tmp_path / f"z{zero}" / "sft1")]
    assert logs[0] == pytest.approx(logs[3], rel=1e-4)
    # ZeRO-0's plain fp32 path keeps no norm in DeepSpeed: the trainer measures the same one
    assert all(n is not None and n > 0 for n in norms[0])
    assert norms[0] == pytest.approx(norms[3], rel=1e-3)
    final = tmp_path / "z3" / "sft1" / "final"
    trained_on = json.loads((final / "trained_on.json").read_text())
    assert trained_on["datasets"][0]["content_hash"] == sha
    assert trained_on["manifest"]["stages"][0]["deepspeed"]["zero_stage"] == 3
    assert trained_on["code_version"] and trained_on["step"] == 3
    weights = load_file(final / "model.safetensors")
    assert weights["model.embed_tokens.weight"].shape[1] == 64
