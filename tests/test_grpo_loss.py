"""GRPO math against hand-computed values: advantages, the token- and sequence-level loss, KL,
entropy, MOPD, and the update's masks and normalization over micro batches and ranks.

The update test runs `training.grpo.update` on a tiny model through a minimal stand-in for
the DeepSpeed engine (backward = autograd, step = nothing) and compares the gradient with the
recipe's formula written out naively, one response at a time, unpacked.
"""

from __future__ import annotations

import doctest
import math

import pytest
import torch

import training.episode
import training.policy_loss
import training.rl_data
import training.rollout.engine
from schemas.training_manifest import GRPOStage
from training.episode import Episode, group_advantages, has_signal, z_scores
from training.policy_loss import grpo_loss_sum, mopd_loss_sum, token_entropy, token_weights

torch.set_num_threads(1)


@pytest.mark.parametrize(
    "module",
    [training.episode, training.policy_loss, training.rl_data, training.rollout.engine],
)
def test_docstring_examples(module) -> None:
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


def test_group_advantages_are_z_scores_of_decided_rewards() -> None:
    # rewards 1, 0, 0, 1, 1: mean 0.6, population std sqrt(0.24)
    std = math.sqrt(0.24)
    expected = [(r - 0.6) / (std + 1e-6) for r in (1, 0, 0, 1, 1)]
    assert group_advantages([1.0, 0.0, 0.0, 1.0, 1.0]) == pytest.approx(expected)
    # an undecided reward is left out of the statistics and gets no advantage
    assert group_advantages([1.0, None, 0.0]) == pytest.approx([1.0, 0.0, -1.0], abs=1e-5)
    # all equal: no signal, zero advantages
    assert group_advantages([0.3, 0.3, 0.3]) == [0.0, 0.0, 0.0]
    assert not has_signal([0.3, 0.3, None]) and has_signal([0.3, 0.2])
    # tanh shaping squashes the z-scores into [-1, 1]
    shaped = group_advantages([5.0, 0.0, 0.0, 0.0], shaping="tanh")
    assert shaped == pytest.approx([math.tanh(z) for z in z_scores([5.0, 0.0, 0.0, 0.0])])
    assert max(map(abs, shaped)) < 1 and group_advantages([5.0, 0.0, 0.0, 0.0])[0] > 1.7


def test_token_level_loss_matches_the_formula() -> None:
    # two responses of 2 and 3 tokens, advantages +1 and -0.5
    p = torch.tensor([0.5, 0.25, 0.8, 0.1, 0.5])
    adv = torch.tensor([1.0, 1.0, -0.5, -0.5, -0.5])
    loss = grpo_loss_sum(p.log(), adv, token_weights(torch.tensor([2, 2, 3, 3, 3]), "token")) / 5
    by_hand = -(
        math.log(0.5) + math.log(0.25) - 0.5 * (math.log(0.8) + math.log(0.1) + math.log(0.5))
    )
    assert float(loss) == pytest.approx(by_hand / 5)
    # sequence level: each response's mean, then the mean over responses
    seq = grpo_loss_sum(p.log(), adv, token_weights(torch.tensor([2, 2, 3, 3, 3]), "sequence")) / 2
    by_hand_seq = (
        -(math.log(0.5) + math.log(0.25)) / 2
        + 0.5 * (math.log(0.8) + math.log(0.1) + math.log(0.5)) / 3
    ) / 2
    assert float(seq) == pytest.approx(by_hand_seq)


def test_kl_and_entropy_terms() -> None:
    logp = torch.log(torch.tensor([0.5, 0.2]))
    ref = torch.log(torch.tensor([0.25, 0.2]))
    zero_adv = torch.zeros(2)
    kl = grpo_loss_sum(logp, zero_adv, torch.ones(2), kl_coef=0.1, ref_logp=ref)
    r = math.log(0.25 / 0.5)
    assert float(kl) == pytest.approx(0.1 * (math.exp(r) - r - 1))  # second token: KL 0
    with pytest.raises(ValueError, match="reference"):
        grpo_loss_sum(logp, zero_adv, torch.ones(2), kl_coef=0.1)
    logits = torch.tensor([[0.0, 0.0], [100.0, 0.0]])
    ent = token_entropy(logits, 1.0)
    assert ent.tolist() == pytest.approx([math.log(2), 0.0], abs=1e-6)
    bonus = grpo_loss_sum(logp, zero_adv, torch.ones(2), entropy_coef=0.5, entropy=ent)
    assert float(bonus) == pytest.approx(-0.5 * math.log(2), abs=1e-6)


def test_mopd_loss_weights_and_ratio_window() -> None:
    logp = torch.log(torch.tensor([0.5, 0.4, 0.3]))
    teacher = torch.log(torch.tensor([0.25, 0.4, 0.6]))
    rollout = torch.log(torch.tensor([0.5, 0.1, 0.3]))  # token 2: ratio 4 > 2 -> weight 0
    loss, weight = mopd_loss_sum(logp, teacher, rollout)
    assert weight.tolist() == pytest.approx([1.0, 0.0, 1.0])
    a = [math.log(0.25 / 0.5), 0.0, math.log(0.6 / 0.3)]
    by_hand = -(a[0] * math.log(0.5) + a[2] * math.log(0.3))
    assert float(loss) == pytest.approx(by_hand)
    # the advantage carries no gradient: d loss / d logp = -w * a
    leaf = logp.clone().requires_grad_(True)
    mopd_loss_sum(leaf, teacher, rollout)[0].backward()
    assert leaf.grad.tolist() == pytest.approx([-a[0], 0.0, -a[2]])


# ------------------------------------------------------------------ the update ----------------


class AutogradEngine(torch.nn.Module):
    """What `update` needs of a DeepSpeed engine, with plain autograd underneath."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.module = model

    def forward(self, **kwargs):
        return self.module(**kwargs)

    def backward(self, loss: torch.Tensor, scale_wrt_gas: bool = False) -> None:
        loss.backward()

    def is_gradient_accumulation_boundary(self) -> bool:
        return False  # the test reads the gradients itself: nothing to measure here

    def step(self) -> None:
        pass


def grpo_stage(**overrides: object) -> GRPOStage:
    spec = {
        "name": "g",
        "type": "grpo",
        "datasets": [{"ref": "p.jsonl", "content_hash": "0" * 64, "prompt_column": "problem"}],
        "optimizer": {"learning_rate": 1e-3},
        "batch": {"prompts_per_step": 2, "rollouts_per_prompt": 2, "micro_batch_size": 1},
        "reward": "math_verifier",
        "max_steps": 1,
        "temperature": 0.7,
        "max_response_len": 8,
        "overlong_filtering": False,
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(spec.get(key), dict):
            spec[key] = {**spec[key], **value}  # type: ignore[dict-item]
        else:
            spec[key] = value
    return GRPOStage.model_validate(spec)


def make_episodes() -> list[Episode]:
    g = torch.Generator().manual_seed(3)
    shapes = [(4, 3, 1.2, True), (5, 2, -0.4, True), (3, 4, 0.7, False), (6, 1, -1.5, True)]
    out = []
    for i, (n_prompt, n_resp, adv, trained) in enumerate(shapes):
        ids = torch.randint(3, 60, (n_prompt + n_resp,), generator=g).tolist()
        out.append(
            Episode(
                draw=i // 2,
                sample=i % 2,
                prompt_uid=str(i // 2),
                mode="think",
                prompt_ids=ids[:n_prompt],
                response_ids=ids[n_prompt:],
                rollout_logprobs=[0.0] * n_resp,
                finish_reason="stop",
                advantage=adv,
                trained=trained,
            )
        )
    return out


def naive_loss(model, episodes: list[Episode], temperature: float, level: str) -> torch.Tensor:
    """The recipe's formula, one unpacked response at a time."""
    trained = [e for e in episodes if e.trained]
    total = torch.zeros(())
    for e in trained:
        ids = torch.tensor([e.prompt_ids + e.response_ids])
        logits = model(input_ids=ids).logits[0].float() / temperature
        logp = torch.log_softmax(logits, -1)
        n = len(e.prompt_ids)
        tok = torch.tensor(e.response_ids)
        lp = logp[n - 1 : n - 1 + len(e.response_ids)].gather(1, tok[:, None]).squeeze(1)
        term = -(e.advantage * lp).sum()
        total = total + (term / len(e.response_ids) if level == "sequence" else term)
    denominator = sum(len(e.response_ids) for e in trained) if level == "token" else len(trained)
    return total / denominator


@pytest.mark.parametrize(("level", "micro"), [("token", 1), ("token", 4), ("sequence", 2)])
def test_update_gradient_equals_the_formula(level: str, micro: int) -> None:
    """Packing, prompt masking, untrained episodes and the micro-batch split all leave the
    gradient equal to the naive formula's."""
    from training.distributed import init_distributed
    from training.grpo import update
    from training.models import build_model
    from training.objectives import GRPOObjective

    init_distributed()
    model = build_model("tiny-random:qwen2", None, 64, "sdpa", seed=0).train()
    episodes = make_episodes()
    stage = grpo_stage(loss_level=level, batch={"micro_batch_size": micro})
    update(AutogradEngine(model), episodes, stage, GRPOObjective(stage), torch.device("cpu"))
    packed = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    naive_loss(model, episodes, stage.temperature, level).backward()
    for name, param in model.named_parameters():
        torch.testing.assert_close(packed[name], param.grad, rtol=1e-4, atol=1e-6, msg=name)
    # control: training on the untrained episode too changes the gradient
    episodes[2].trained = True
    model.zero_grad()
    naive_loss(model, episodes, stage.temperature, level).backward()
    diff = max(float((packed[n] - p.grad).abs().max()) for n, p in model.named_parameters())
    assert diff > 1e-5


def test_update_reports_the_rollout_logprob_gap_and_kl() -> None:
    """With the rollout's own log-probs recorded, the gap is ~0; a reference equal to the
    policy gives KL 0."""
    from training.distributed import init_distributed
    from training.grpo import update
    from training.models import build_model
    from training.objectives import GRPOObjective
    from training.packed_episodes import pack_episodes, packed_logits
    from training.rollout import sampling_logprobs

    init_distributed()
    model = build_model("tiny-random:qwen2", None, 64, "sdpa", seed=0)
    episodes = make_episodes()
    with torch.no_grad():
        for e in episodes:
            batch = pack_episodes([e], torch.device("cpu"))
            logits = packed_logits(model, batch)
            lp = sampling_logprobs(logits, batch.labels.clamp(min=0), 0.7)[batch.response]
            e.rollout_logprobs = lp.tolist()
    reference = build_model("tiny-random:qwen2", None, 64, "sdpa", seed=0).eval()
    stage = grpo_stage(kl_coef=0.05)
    objective = GRPOObjective(stage, reference=reference)
    stats = update(AutogradEngine(model), episodes, stage, objective, torch.device("cpu"))
    assert stats["logprob_gap"] < 1e-5
    assert stats["kl"] == pytest.approx(0.0, abs=1e-6)


def test_mopd_teacher_log_probs_come_from_each_episodes_domain_teacher() -> None:
    from training.models import build_model
    from training.objectives import teacher_logprobs
    from training.packed_episodes import pack_episodes, packed_logits
    from training.rollout import sampling_logprobs

    teachers = {
        "math": build_model("tiny-random:qwen2", None, 64, "sdpa", seed=1).eval(),
        "chat": build_model("tiny-random:qwen2", None, 64, "sdpa", seed=2).eval(),
    }
    episodes = make_episodes()
    for e, domain in zip(episodes, ["math", "chat", "chat", "math"], strict=True):
        e.domain = domain
    batch = pack_episodes(episodes, torch.device("cpu"))
    labels = batch.labels.clamp(min=0)
    got = teacher_logprobs(teachers, episodes, batch, labels, 0.7)
    with torch.no_grad():
        for i, e in enumerate(episodes):
            alone = pack_episodes([e], torch.device("cpu"))
            logits = packed_logits(teachers[e.domain], alone)  # type: ignore[index]
            want = sampling_logprobs(logits, alone.labels.clamp(min=0), 0.7)[alone.response]
            mine = (batch.episode == i) & batch.response
            torch.testing.assert_close(got[mine], want, rtol=1e-5, atol=1e-5)
