"""When a GRPO stage ends early or fails: the length curriculum (a minimum number of steps and a
smoothed truncated share, recipe 7.4) and a stage whose rewards carry no learning signal.

The stage runs for real (`cascade train` on a tiny random model, DeepSpeed on CPU) with a
scripted rollout engine standing in for sampling: it cuts a chosen number of each step's
responses at the length cap and answers token A or B as the test says, so the truncated
shares and the rewards of every step are known in advance.
"""

from __future__ import annotations

import doctest
import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import training.stopping
from builders.worlds.toy_world import write_jsonl
from cli.console import CascadeError
from schemas.generation import Completion
from schemas.training_manifest import LengthCurriculumSpec
from training.episode import Episode
from training.models import train_bpe_tokenizer
from training.step_log import read_log
from training.stopping import LengthCurriculum, SignalWatch

RESPONSES = 16  # 4 prompts x 4 rollouts per step
# Truncated responses per step, in 16ths: 0.0625, 0.25, 0.0625, 0.125, 0, ...
CUT_PER_STEP = [1, 4, 1, 2, 0, 0, 0, 0, 0, 0]


def test_docstring_examples() -> None:
    result = doctest.testmod(training.stopping)
    assert result.attempted > 0 and result.failed == 0


def test_the_curriculum_runs_its_minimum_and_stops_when_the_smoothed_share_crosses() -> None:
    shares = [n / RESPONSES for n in CUT_PER_STEP]
    # The old rule (stop at the first step with share <= 0.1) would have ended at step 1.
    assert next(i for i, s in enumerate(shares, 1) if s <= 0.1) == 1
    curriculum = LengthCurriculum(
        LengthCurriculumSpec(truncated_share=0.1, min_steps=3, smoothing_steps=3)
    )
    smoothed, stopped_at = [], None
    for step, share in enumerate(shares, 1):
        smoothed.append(round(curriculum.observe(share), 4))
        if curriculum.stop_reason(step):
            stopped_at = step
            break
    # EMA with alpha 2/(3+1) = 0.5; at step 3 the raw share (0.0625) is under 0.1 but the
    # smoothed one (0.1094) is not, so a rule on the raw share with the minimum would stop there.
    assert smoothed == [0.0625, 0.1562, 0.1094, 0.1172, 0.0586]
    assert stopped_at == 5
    assert curriculum.stop_reason(5) == (
        "truncated share (EMA over 3 steps) 0.059 <= 0.1 after 5 steps (min 3)"
    )


def episodes(rewards: list[float | None], truncated: bool = False, trained=True) -> list[Episode]:
    return [
        Episode(0, i, "p", "think", [1], [2], [0.0], "length" if truncated else "stop", None, "",
                reward=r, trained=trained)
        for i, r in enumerate(rewards)
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("groups", "cause"),
    [
        ([[0.0, 0.0], [0.0, 0.0]], "all 0.0: the policy solves nothing"),
        ([[1.0, 1.0], [1.0, 1.0]], "all 1.0: the policy solves every prompt"),
        ([[None, None], [None, None]], "all None: the reward could not decide any reply"),
        ([[0.0, 0.0], [1.0, 1.0]], "one value per group (0.0, 1.0)"),
    ],
)
def test_no_signal_for_patience_steps_fails_naming_the_reward_and_the_cause(groups, cause) -> None:
    watch = SignalWatch("math_rl", "math_verifier", patience=3, columns=("answer",))
    batch = [episodes(g, trained=all(r is not None for r in g)) for g in groups]
    assert watch.observe(batch) is None and watch.observe(batch) is None
    message = watch.observe(batch)
    assert message is not None and cause in message
    assert message.startswith(
        "stage math_rl: every group's reward (math_verifier) was identical for 3 steps in a row ("
    )
    assert "\n" not in message
    if None in groups[0]:
        assert "check the reward's columns: `answer`" in message


def test_a_step_with_signal_resets_the_count_and_patience_0_never_fails() -> None:
    watch = SignalWatch("s", "math_verifier", patience=2)
    flat, mixed = [episodes([0.0, 0.0])], [episodes([0.0, 1.0])]
    assert [watch.observe(b) for b in (flat, flat)][-1] is not None  # never a signal: fails
    watch = SignalWatch("s", "math_verifier", patience=2)
    assert [watch.observe(b) for b in (flat, mixed, flat)] == [None, None, None]
    assert watch.exhausted is None
    capped = SignalWatch("s", "math_verifier", patience=0, max_response_len=96)
    for _ in range(10):
        assert capped.observe([episodes([0.0, 0.0], truncated=True, trained=False)]) is None
    assert capped.summary() == (
        "0 of 10 steps had a group with a learning signal (every response hit max_response_len "
        "96 and overlong filtering gives those no gradient: raise max_response_len or turn "
        "overlong_filtering off); no_signal_patience is 0: a plumbing check, not training"
    )


def test_a_stage_that_learned_until_no_signal_is_left_ends_instead_of_failing() -> None:
    """Solved always or never after learning (batch filtering finds no mixed group): the
    stage has learned what its prompts teach, so it ends with the reason, and the values
    of the filtered (untrained) groups still name the cause."""
    watch = SignalWatch("if_rl", "if_verifier", patience=2)
    mixed = [episodes([0.0, 1.0])]
    solved = [episodes([1.0, 1.0], trained=False), episodes([0.0, 0.0], trained=False)]
    assert [watch.observe(b) for b in (mixed, solved, solved)] == [None, None, None]
    assert watch.exhausted == (
        "no learning signal left: every group's reward (if_verifier) was identical for 2 steps "
        "in a row (one value per group (0.0, 1.0): each prompt is solved always or never "
        "(dynamic_filtering batch draws fresh prompts until a batch has mixed groups)) after 1 "
        "steps with a signal"
    )


# ------------------------------------------------------------------ the stage, run for real --


class ScriptedRollouts:
    """Step i cuts `CUT_PER_STEP[i]` responses at the cap; rollout k answers A if k is even."""

    def __init__(self, tokenizer) -> None:
        self.a, self.b = tokenizer.convert_tokens_to_ids(["a", "b"])
        self.stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.calls = 0

    def generate(self, requests):
        cut = CUT_PER_STEP[self.calls] if self.calls < len(CUT_PER_STEP) else 0
        self.calls += 1
        for i, r in enumerate(requests):
            token = self.a if r.key % 2 == 0 else self.b
            if i < cut:
                tokens = [token] * r.sampling.max_new_tokens
                yield Completion(r.key, "", 0, 4, "length", token_ids=tokens, logprobs=[0.0] * 4)
            else:
                tokens = [token, self.stop]
                yield Completion(r.key, "", 0, 2, "stop", token_ids=tokens, logprobs=[0.0, 0.0])

    def load_weights(self, weights) -> None:
        for _ in weights:
            pass

    def close(self) -> None:
        pass


@pytest.fixture
def stage_manifest(tmp_path: Path, monkeypatch):
    """Write a one-GRPO-stage manifest (tiny model, saved tokenizer) with `extra` settings."""
    tokenizer = train_bpe_tokenizer(["What is 1 + 2? /think /no_think a b hello world"], 300)
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    import training.grpo

    monkeypatch.setattr(
        training.grpo, "make_rollout_engine", lambda *a, **k: ScriptedRollouts(tokenizer)
    )
    rows = [{"problem": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(8)]
    write_jsonl(tmp_path / "rl.jsonl", rows)
    digest = hashlib.sha256((tmp_path / "rl.jsonl").read_bytes()).hexdigest()

    def write(**extra: object) -> Path:
        stage = {
            "name": "math_rl",
            "type": "grpo",
            "datasets": [{"ref": "rl.jsonl", "content_hash": digest, "prompt_column": "problem"}],
            "reward": "math_verifier",
            "max_steps": 8,
            "temperature": 1.0,
            "max_response_len": 4,
            "overlong_filtering": False,
            "batch": {"prompts_per_step": 4, "rollouts_per_prompt": 4, "micro_batch_size": 16},
            "optimizer": {"learning_rate": 1e-4, "schedule": "constant"},
            "deepspeed": {"zero_stage": 0, "bf16": False},
            "gradient_checkpointing": False,
            "checkpoint_every_steps": 100,
            **extra,
        }
        spec = {
            "name": "stopping",
            "base_model": "tiny-random:qwen2",
            "model_overrides": {
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "num_key_value_heads": 1,
            },
            "tokenizer": str(tmp_path / "tokenizer"),
            "attn_implementation": "sdpa",
            "output_dir": "out",
            "stages": [stage],
        }
        path = tmp_path / "m.json"
        path.write_text(json.dumps(spec))
        return path

    return write


def a_is_right(prompts, completions, **_):
    return [float(c.startswith("a")) for c in completions]


def train(manifest: Path, reward_fn) -> list[str]:
    from training.runner import run_cascade

    said: list[str] = []
    run_cascade(manifest, say=said.append, reward_fn=reward_fn)
    return said


def test_the_curriculum_ends_the_stage_in_the_loop_and_says_why(stage_manifest) -> None:
    manifest = stage_manifest(
        length_curriculum={"truncated_share": 0.1, "min_steps": 3, "smoothing_steps": 3}
    )
    said = train(manifest, a_is_right)
    log = read_log(manifest.parent / "out" / "math_rl")
    assert [r["step"] for r in log] == [1, 2, 3, 4, 5]
    assert [r["truncated_share"] for r in log] == [n / RESPONSES for n in CUT_PER_STEP[:5]]
    assert round(log[-1]["truncated_share_smoothed"], 4) == 0.0586
    reason = "truncated share (EMA over 3 steps) 0.059 <= 0.1 after 5 steps (min 3)"
    assert log[-1]["stop_reason"] == reason and "stop_reason" not in log[-2]
    final = manifest.parent / "out" / "math_rl" / "final" / "trained_on.json"
    record = json.loads(final.read_text())
    assert (record["step"], record["stopped_early"], record["stop_reason"]) == (5, True, reason)
    assert f"stage math_rl: ended: {reason}; 5 of 5 steps had a group with a learning signal" in (
        said
    )


def test_max_steps_is_a_stop_reason_too(stage_manifest) -> None:
    manifest = stage_manifest(
        max_steps=4,
        length_curriculum={"truncated_share": 0.1, "min_steps": 3, "smoothing_steps": 3},
    )
    train(manifest, a_is_right)
    log = read_log(manifest.parent / "out" / "math_rl")
    assert log[-1]["stop_reason"] == (
        "max_steps reached (4); truncated share (EMA over 3 steps) 0.117 still above 0.1"
    )


def test_cascade_train_fails_in_one_sentence_when_no_reward_differs(
    stage_manifest, monkeypatch
) -> None:
    import training.runner
    from cli.main import command_app

    manifest = stage_manifest(no_signal_patience=3)
    original = training.runner.run_cascade

    def constant_reward(*args, **kwargs):  # the CLI passes no reward_fn; inject a constant one
        return original(*args, **kwargs, reward_fn=lambda p, c, **_: [0.0] * len(c))

    monkeypatch.setattr(training.runner, "run_cascade", constant_reward)
    result = CliRunner().invoke(command_app(), ["train", "--manifest", str(manifest)])
    assert isinstance(result.exception, CascadeError), result.output
    message = str(result.exception)
    assert message == (
        "stage math_rl: every group's reward (a custom reward function) was identical for 3 "
        "steps in a row (all 0.0: the policy solves nothing (the prompts are too hard for it, "
        "or its replies lack the answer form the reward reads)), so the stage learns nothing; "
        "set no_signal_patience 0 only for a plumbing check that expects no signal"
    )
    stage_dir = manifest.parent / "out" / "math_rl"
    assert [r["step"] for r in read_log(stage_dir)] == [1, 2, 3]
    assert read_log(stage_dir)[-1]["stop_reason"] == message
    assert not (stage_dir / "final").exists()  # a resumed cascade must not skip a failed stage


def test_a_plumbing_check_runs_through_and_says_so(stage_manifest) -> None:
    manifest = stage_manifest(no_signal_patience=0, max_steps=3)
    said = train(manifest, lambda p, c, **_: [None] * len(c))
    assert said[-1] == (
        "stage math_rl: ended: max_steps reached (3); 0 of 3 steps had a group with a learning "
        "signal (all None: the reward could not decide any reply (check the reward's columns: "
        "its inputs)); no_signal_patience is 0: a plumbing check, not training"
    )


def test_a_stage_whose_signal_runs_out_ends_with_a_final_model(stage_manifest) -> None:
    """Signal first, then every reply is right: after `no_signal_patience` steps without a
    signal the stage ends (no signal left) with its final model, and the cascade goes on."""
    manifest = stage_manifest(no_signal_patience=3)
    scored = []

    def learned_after_two_steps(prompts, completions, **_):
        scored.extend(completions)
        if len(scored) <= 2 * RESPONSES:
            return a_is_right(prompts, completions)
        return [1.0] * len(completions)

    said = train(manifest, learned_after_two_steps)
    stage_dir = manifest.parent / "out" / "math_rl"
    log = read_log(stage_dir)
    with_signal = sum(r["signal_groups"] > 0 for r in log)
    assert with_signal >= 2 and [r["signal_groups"] for r in log[-3:]] == [0, 0, 0]
    assert len(log) == with_signal + 3 < 8  # ended before max_steps
    reason = (
        "no learning signal left: every group's reward (a custom reward function) was identical "
        "for 3 steps in a row (all 1.0: the policy solves every prompt (too easy to learn from)) "
        f"after {with_signal} steps with a signal"
    )
    assert log[-1]["stop_reason"] == reason
    record = json.loads((stage_dir / "final" / "trained_on.json").read_text())
    assert (record["step"], record["stopped_early"], record["stop_reason"]) == (
        len(log),
        True,
        reason,
    )
    assert (
        f"stage math_rl: ended: {reason}; {with_signal} of {len(log)} steps had a group with a "
        "learning signal"
    ) in said


def test_held_out_samples_take_the_evaluation_budget_where_it_sets_one(
    stage_manifest, monkeypatch
) -> None:
    """Phases of a length curriculum train at different budgets; their held-out scores compare
    only when every phase samples the held-out set at one budget (evaluation.max_response_len)."""
    import training.grpo

    budgets: list[tuple[int, int]] = []  # (max_new_tokens, requests) per generate call
    engine_for = training.grpo.make_rollout_engine

    def recording(*args, **kwargs):
        engine = engine_for(*args, **kwargs)
        generate = engine.generate

        def generate_and_record(requests):
            budgets.append((requests[0].sampling.max_new_tokens, len(requests)))
            assert len({r.sampling.max_new_tokens for r in requests}) == 1
            return generate(requests)

        engine.generate = generate_and_record
        return engine

    monkeypatch.setattr(training.grpo, "make_rollout_engine", recording)
    manifest = stage_manifest(max_steps=2)
    stage = json.loads(manifest.read_text())
    dataset = stage["stages"][0]["datasets"][0]
    held_out = {"dataset": dataset, "every_steps": 2, "samples_per_prompt": 1}
    for evaluation, eval_budget in ((held_out, 4), ({**held_out, "max_response_len": 12}, 12)):
        budgets.clear()
        stage["stages"][0]["evaluation"] = evaluation
        stage["output_dir"] = f"out-{eval_budget}"
        manifest.write_text(json.dumps(stage))
        train(manifest, a_is_right)
        # step 0 and step 2 evaluate the 8 held-out prompts; steps 1 and 2 train 16 rollouts
        assert budgets == [(eval_budget, 8), (4, RESPONSES), (4, RESPONSES), (eval_budget, 8)]
        log = read_log(manifest.parent / f"out-{eval_budget}" / "math_rl")
        assert [r["eval_samples"] for r in log if "eval_samples" in r] == [8, 8]
