"""Filters and batch assembly of the GRPO loop: batch-level dynamic filtering (resample with a
cap), epoch-level filtering and its re-admission rates, overlong filtering on/off, the
thinking-mode mix, a resumable prompt order, and rewards scored while generation goes on.

`collect_batch` runs for real against a scripted engine (no model): each request's response
is one token chosen by the test, so which groups carry signal is known in advance.
"""

from __future__ import annotations

import threading
import time

import pytest

from schemas.chat_template import Message
from schemas.generation import Completion, SamplingParams
from schemas.training_manifest import GRPOStage
from training.distributed import init_distributed
from training.grpo import StepTimer, collect_batch
from training.models import train_bpe_tokenizer
from training.objectives import GRPOObjective
from training.rewards import RewardPool, StageRewards
from training.rl_data import EpochFilter, Prompt, PromptStream, thinking_mode

STOP = 99


@pytest.fixture(scope="module")
def tokenizer():
    return train_bpe_tokenizer(["What is 1 + 2? /think /no_think hello world abc"], 300)


class ScriptedEngine:
    """Rollout k of a request answers token A (id 10) or B (id 11) as `choose` says."""

    name = "scripted"

    def __init__(self, choose, truncate=lambda key: False, delay: float = 0.0) -> None:
        self.choose, self.truncate, self.delay = choose, truncate, delay
        self.requests: list = []
        self.last_yield = 0.0

    def generate(self, requests):
        self.requests.extend(requests)
        for r in requests:
            time.sleep(self.delay)
            token = 10 if self.choose(r) else 11
            cut = self.truncate(r.key)
            self.last_yield = time.monotonic()
            tokens = [token] if cut else [token, STOP]
            yield Completion(
                r.key,
                "",
                len(r.prompt_ids),
                len(tokens),
                "length" if cut else "stop",
                token_ids=tokens,
                logprobs=[0.0] * len(tokens),
            )

    def load_weights(self, weights) -> None:  # pragma: no cover - not used here
        pass

    def close(self) -> None:
        pass


def grpo_stage(**extra: object) -> GRPOStage:
    spec = {
        "name": "f",
        "type": "grpo",
        "datasets": [{"ref": "p.jsonl", "content_hash": "0" * 64, "prompt_column": "problem"}],
        "optimizer": {"learning_rate": 1e-6},
        "batch": {"prompts_per_step": 4, "rollouts_per_prompt": 4},
        "reward": "math_verifier",
        "max_steps": 1,
        "temperature": 1.0,
        "max_response_len": 4,
        "overlong_filtering": False,
        "seed": 0,
        **extra,
    }
    return GRPOStage.model_validate(spec)


def prompts(kinds: list[str]) -> list[Prompt]:
    """kind: `mixed` (half the rollouts right), `all` right, `none` right."""
    return [
        Prompt(f"0:{i}", (Message("user", f"What is {i} + 1?"),), {"kind": k}, f"row {i}")
        for i, k in enumerate(kinds)
    ]


def reward_by_kind(tokenizer):
    a = tokenizer.decode([10])

    def reward(prompts_, completions, kind, **_):
        out = []
        for k, c in zip(kind, completions, strict=True):
            out.append({"all": 1.0, "none": 0.0}.get(k, float(c == a)))
        return out

    return reward


def alternate(request) -> bool:
    return request.key % 2 == 0  # within a group of 4 consecutive keys: A, B, A, B


def run_collect(stage, engine, prompt_list, tokenizer, seed=0):
    init_distributed()
    stream = PromptStream(prompt_list, seed=seed)
    pool = RewardPool(StageRewards(stage, override=reward_by_kind(tokenizer)), workers=2)
    sampling = SamplingParams(max_new_tokens=4, temperature=1.0, top_p=1.0, stop_token_ids=(STOP,))
    try:
        objective = GRPOObjective(stage, pool=pool)
        return collect_batch(
            stream, engine, sampling, tokenizer, stage, objective, StepTimer()
        ), stream
    finally:
        pool.close()


def test_batch_filtering_refills_with_fresh_prompts(tokenizer) -> None:
    kinds = ["none", "all", "mixed", "none", "all", "none", "mixed", "all"] * 4
    stage = grpo_stage(dynamic_filtering="batch", max_resample_rounds=8)
    batch, stream = run_collect(stage, ScriptedEngine(alternate), prompts(kinds), tokenizer)
    assert len(batch.groups) == 4 and batch.rounds > 1 and batch.drawn > 4
    for group in batch.groups:  # every group in the batch carries signal
        assert {e.reward for e in group} == {0.0, 1.0} and all(e.trained for e in group)
    assert stream.draws == batch.drawn  # drawn prompts are consumed from the stream


def test_the_drawn_reward_counts_the_groups_batch_filtering_left_out(tokenizer) -> None:
    """The trained groups are mixed by construction (mean 0.5 here): how the policy scores
    on what it drew, solved prompts included, is `drawn_reward_mean`."""
    kinds = ["all", "mixed", "all", "all"] * 8
    stage = grpo_stage(dynamic_filtering="batch", max_resample_rounds=8)
    batch, _ = run_collect(stage, ScriptedEngine(alternate), prompts(kinds), tokenizer)
    solved, mixed = batch.filtered_groups, batch.drawn - batch.filtered_groups
    assert solved > 0 and mixed >= 4
    summary = batch.summary()
    assert summary["reward_mean"] == 0.5
    assert summary["drawn_reward_mean"] == (solved * 1.0 + mixed * 0.5) / batch.drawn > 0.5
    unfiltered, _ = run_collect(grpo_stage(), ScriptedEngine(alternate), prompts(kinds), tokenizer)
    assert unfiltered.summary()["drawn_reward_mean"] == unfiltered.summary()["reward_mean"]


def test_batch_filtering_stops_at_the_cap_and_fills_untrained(tokenizer) -> None:
    kinds = ["none", "all", "none", "mixed"] * 8
    stage = grpo_stage(dynamic_filtering="batch", max_resample_rounds=0)
    batch, _ = run_collect(stage, ScriptedEngine(alternate), prompts(kinds), tokenizer)
    assert batch.rounds == 1 and batch.drawn == 4 and len(batch.groups) == 4
    signal = [g for g in batch.groups if all(e.trained for e in g)]
    filler = [g for g in batch.groups if not any(e.trained for e in g)]
    assert len(signal) == 1 and len(filler) == 3 and batch.filtered_groups == 3


def test_without_filtering_zero_signal_groups_stay(tokenizer) -> None:
    kinds = ["none", "all", "none", "mixed"]
    batch, _ = run_collect(grpo_stage(), ScriptedEngine(alternate), prompts(kinds), tokenizer)
    assert batch.rounds == 1 and all(e.trained for e in batch.episodes)
    assert batch.summary()["signal_groups"] == 1


@pytest.mark.parametrize("overlong_filtering", [True, False])
def test_overlong_filtering(tokenizer, overlong_filtering: bool) -> None:
    kinds = ["all"] * 4
    engine = ScriptedEngine(lambda r: True, truncate=lambda key: key % 4 == 3)
    stage = grpo_stage(overlong_filtering=overlong_filtering)
    batch, _ = run_collect(stage, engine, prompts(kinds), tokenizer)
    capped = [e for e in batch.episodes if e.truncated]
    assert len(capped) == 4
    if overlong_filtering:  # no gradient from capped responses
        assert not any(e.trained for e in capped)
    else:  # they stay, with the verifier's low reward
        assert all(e.trained and e.reward == 0.0 for e in capped)
    assert all(e.trained and e.reward == 1.0 for e in batch.episodes if not e.truncated)
    assert batch.summary()["truncated_share"] == 0.25


def test_thinking_mode_mix_per_batch(tokenizer) -> None:
    stage = grpo_stage(thinking_fraction=0.5)
    engine = ScriptedEngine(alternate)
    batch, _ = run_collect(stage, engine, prompts(["mixed"] * 8), tokenizer)
    assert batch.summary()["think_share"] == 0.5
    flags = [tokenizer.decode(r.prompt_ids) for r in engine.requests]
    assert sum("/think<|im_end|>" in f for f in flags) == 8
    assert sum("/no_think<|im_end|>" in f for f in flags) == 8
    assert [thinking_mode(i, 0.25) for i in range(8)].count("think") == 2


def test_rewards_are_scored_while_generation_goes_on(tokenizer) -> None:
    """The first group's reward starts before the engine has yielded its last rollout."""
    started: list[float] = []
    lock = threading.Lock()
    inner = reward_by_kind(tokenizer)

    def timed(prompts_, completions, **columns):
        with lock:
            started.append(time.monotonic())
        return inner(prompts_, completions, **columns)

    init_distributed()
    stage = grpo_stage()
    engine = ScriptedEngine(alternate, delay=0.02)
    pool = RewardPool(StageRewards(stage, override=timed), workers=2)
    sampling = SamplingParams(max_new_tokens=4, temperature=1.0, top_p=1.0, stop_token_ids=(STOP,))
    stream = PromptStream(prompts(["mixed"] * 4), seed=0)
    timer = StepTimer()
    collect_batch(
        stream, engine, sampling, tokenizer, stage, GRPOObjective(stage, pool=pool), timer
    )
    pool.close()
    assert len(started) == 4 and min(started) < engine.last_yield - 0.02
    assert timer.seconds["reward_wait_s"] < timer.seconds["rollout_s"]


def test_epoch_filter_readmission_rates() -> None:
    n = 20_000
    uids = [str(i) for i in range(n)]
    f = EpochFilter(seed=7, readmit_hard=0.10, readmit_easy=0.01)
    for i, uid in enumerate(uids):  # a third always solved, a third never, a third mixed
        f.observe(uid, [8, 0, 3][i % 3], 8)
    pool = set(f.next_pool(uids, epoch=1))
    easy = [u for i, u in enumerate(uids) if i % 3 == 0]
    hard = [u for i, u in enumerate(uids) if i % 3 == 1]
    mixed = [u for i, u in enumerate(uids) if i % 3 == 2]
    assert all(u in pool for u in mixed)
    hard_rate = sum(u in pool for u in hard) / len(hard)
    easy_rate = sum(u in pool for u in easy) / len(easy)
    # binomial standard errors: 0.0037 (hard), 0.0012 (easy); 5 of them either way
    assert abs(hard_rate - 0.10) < 0.019 and abs(easy_rate - 0.01) < 0.006
    # the next pass draws again, independently, for prompts not seen in between
    again = set(f.next_pool(uids, epoch=2))
    assert (
        all(u in again for u in mixed) and 0.07 < sum(u in again for u in hard) / len(hard) < 0.13
    )
    assert len(again & pool & set(hard)) < 0.03 * len(hard)  # not the same re-admitted set


def test_prompt_stream_resumes_exactly_with_its_filter_state() -> None:
    def make() -> PromptStream:
        return PromptStream(prompts(["x"] * 10), seed=3, epoch_filter=EpochFilter(seed=3))

    a = make()
    first = [p.uid for _, p in a.take(7)]
    for uid in first[:4]:
        a.observe(uid, 4, 4)  # solved every time: dropped as easy at the pass's end
    state = a.state_dict()
    b = make()
    b.load_state_dict(state)
    rest_a = [(d, p.uid) for d, p in a.take(25)]
    rest_b = [(d, p.uid) for d, p in b.take(25)]
    assert rest_a == rest_b
    assert [d for d, _ in rest_a] == list(range(7, 32))
    # each pass is a permutation of its pool; the easy prompts mostly sit out pass 1
    second_pass = [u for _, u in rest_a[3:]][: len(a.order)]
    assert sum(u in first[:4] for u in second_pass) <= 1
