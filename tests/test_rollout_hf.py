"""The `hf` rollout engine: greedy rollouts equal `model.generate` token for token (with rows
refilled as they finish), sampling follows temperature / top-k / top-p and depends only on each
request's seed, and the recorded log-probs equal the training forward's.

Model: a random 2-layer Qwen2 (vocab 64). Its greedy outputs repeat a few tokens, so one of
them serves as the stop token and rows end at different lengths.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import replace

import pytest
import torch

from schemas.generation import GenerationRequest, SamplingParams
from training.episode import Episode
from training.models import build_model
from training.rollout import rollout_request, sampling_logprobs
from training.rollout.hf import HfEngine

torch.set_num_threads(1)
VOCAB = 64


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return build_model("tiny-random:qwen2", None, VOCAB, "sdpa", seed=5).eval()


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(11)
    lengths = torch.randint(2, 14, (9,), generator=g).tolist()
    return [torch.randint(3, VOCAB, (n,), generator=g).tolist() for n in lengths]


def engine_for(model: torch.nn.Module, batch_size: int) -> HfEngine:
    engine = HfEngine.from_policy(model, batch_size=batch_size)
    engine.load_weights(model.named_parameters())
    return engine


def requests_for(
    prompts: list[list[int]], sampling: SamplingParams, first_seed: int = 0
) -> list[GenerationRequest]:
    """Request i samples prompt i with seed `first_seed + i`."""
    return [rollout_request(i, p, sampling, first_seed + i) for i, p in enumerate(prompts)]


def reference_greedy(model, prompt: list[int], stop: int, cap: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]),
            max_new_tokens=cap,
            do_sample=False,
            eos_token_id=stop,
            pad_token_id=0,
        )[0, len(prompt) :].tolist()
    return out[: out.index(stop) + 1] if stop in out else out


@pytest.fixture(scope="module")
def stop_token(model, prompts) -> int:
    """A token the greedy outputs reach at different lengths (so rows finish unevenly)."""
    firsts: dict[int, set[int]] = {}
    for prompt in prompts:
        out = reference_greedy(model, prompt, stop=-1, cap=24)
        for position, token in enumerate(out):
            firsts.setdefault(token, set()).add(out.index(token) if token in out else position)
    counts = Counter({t: len(p) for t, p in firsts.items()})
    return counts.most_common(1)[0][0]


def test_greedy_equals_model_generate_token_for_token(model, prompts, stop_token) -> None:
    cap = 24
    engine = engine_for(model, batch_size=3)  # 9 prompts through 3 slots: rows are refilled
    sampling = SamplingParams(max_new_tokens=cap, temperature=0, stop_token_ids=(stop_token,))
    requests = requests_for(prompts, sampling)
    order = [r.key for r in engine.generate(requests)]
    got = {r.key: r for r in engine.generate(requests)}
    lengths = set()
    for i, prompt in enumerate(prompts):
        expected = reference_greedy(model, prompt, stop_token, cap)
        assert got[i].token_ids == expected, i
        assert got[i].finish_reason == ("stop" if expected[-1] == stop_token else "length")
        lengths.add(len(expected))
    assert len(lengths) > 2, lengths  # rows really did finish at different times
    assert order != sorted(order)  # ... and were yielded as they finished


def test_sampling_depends_only_on_the_seed(model, prompts, stop_token) -> None:
    sampling = SamplingParams(
        max_new_tokens=16, temperature=1.0, top_p=0.9, top_k=20, stop_token_ids=(stop_token,)
    )
    requests = requests_for(prompts, sampling, 100)
    a = {r.key: r.token_ids for r in engine_for(model, 2).generate(requests)}
    b = {r.key: r.token_ids for r in engine_for(model, 7).generate(requests[::-1])}
    assert a == b
    reseeded = requests_for(prompts, sampling, 200)
    c = {r.key: r.token_ids for r in engine_for(model, 7).generate(reseeded)}
    assert sum(a[k] != c[k] for k in a) >= len(a) // 2
    top1 = SamplingParams(
        max_new_tokens=16, temperature=1.0, top_p=1.0, top_k=1, stop_token_ids=(stop_token,)
    )
    greedy = SamplingParams(max_new_tokens=16, temperature=0, stop_token_ids=(stop_token,))
    engine = engine_for(model, 4)
    assert {r.key: r.token_ids for r in engine.generate(requests_for(prompts, top1, 100))} == {
        r.key: r.token_ids for r in engine.generate(requests_for(prompts, greedy, 100))
    }


def nucleus(probs: torch.Tensor, top_p: float, top_k: int) -> torch.Tensor:
    """The reference: keep the top-k, then the smallest set whose mass reaches top-p."""
    if top_k:
        keep = torch.zeros_like(probs, dtype=torch.bool)
        keep[probs.topk(top_k).indices] = True
        probs = torch.where(keep, probs, 0.0)
    if top_p < 1:
        ordered, index = (probs / probs.sum()).sort(descending=True)
        above = ordered.cumsum(0) - ordered  # mass of the tokens ranked higher
        keep = torch.zeros_like(probs, dtype=torch.bool)
        keep[index[above < top_p]] = True
        probs = torch.where(keep, probs, 0.0)
    return probs / probs.sum()


@pytest.mark.parametrize(
    ("temperature", "top_p", "top_k"), [(0.7, 1.0, 0), (1.3, 0.8, 0), (1.0, 1.0, 5)]
)
def test_first_token_distribution_follows_temperature_top_p_top_k(
    model, temperature: float, top_p: float, top_k: int
) -> None:
    """Pearson chi-square of 4000 first tokens against the reference distribution; the same
    counts against the distribution at another temperature are rejected (the test can fail)."""
    from scipy.stats import chisquare

    peaked = copy.deepcopy(model)
    with torch.no_grad():
        peaked.lm_head.weight.mul_(12)  # a random model is near-uniform: sharpen it
    prompt = [5, 9, 17, 33]
    n = 4000
    sampling = SamplingParams(
        max_new_tokens=1, temperature=temperature, top_p=top_p, top_k=top_k, stop_token_ids=(0,)
    )
    requests = requests_for([prompt] * n, sampling)
    counts = Counter(r.token_ids[0] for r in engine_for(peaked, 512).generate(requests))
    with torch.no_grad():
        logits = peaked(input_ids=torch.tensor([prompt])).logits[0, -1].float()

    def p_value(t: float) -> float:
        probs = nucleus(torch.softmax(logits.double() / t, -1), top_p, top_k)
        support = [i for i in range(VOCAB) if probs[i] > 0]
        if set(counts) - set(support):
            return 0.0  # a token outside the nucleus was drawn
        big = [i for i in support if n * probs[i] >= 5]  # rare tokens share one bin
        rest = [i for i in support if i not in big]
        observed = [counts.get(i, 0) for i in big] + [sum(counts.get(i, 0) for i in rest)]
        expected = [n * float(probs[i]) for i in big] + [n * float(probs[rest].sum())]
        if not rest:
            observed, expected = observed[:-1], expected[:-1]
        expected = [e * n / sum(expected) for e in expected]
        return float(chisquare(observed, expected).pvalue)

    assert p_value(temperature) > 1e-3
    assert p_value(temperature * 1.6) < 1e-6


def test_length_caps_and_cache_reuse(model, prompts) -> None:
    engine = engine_for(model, batch_size=4)
    sampling = SamplingParams(
        max_new_tokens=10, temperature=1.0, top_p=1.0, stop_token_ids=(VOCAB + 1,)
    )
    requests = [
        rollout_request(i, p, replace(sampling, max_new_tokens=3 + i % 4), seed=i)
        for i, p in enumerate(prompts)
    ]
    out = {r.key: r for r in engine.generate(requests)}
    assert all(len(out[i].token_ids) == 3 + i % 4 for i in out)
    assert all(r.finish_reason == "length" for r in out.values())
    cache = engine._cache
    list(engine.generate(requests[:2]))
    assert engine._cache is cache  # the static cache is allocated once and reused


def test_rollout_logprobs_equal_the_training_forward(model, prompts, stop_token) -> None:
    """The on-policy claim: what the engine recorded is what the update computes (packed)."""
    from training.packed_episodes import pack_episodes, packed_logits

    sampling = SamplingParams(
        max_new_tokens=20, temperature=0.7, top_p=0.95, stop_token_ids=(stop_token,)
    )
    rollouts = list(engine_for(model, 3).generate(requests_for(prompts, sampling, 7)))
    episodes = [
        Episode(0, r.key, "u", "think", prompts[r.key], r.token_ids, r.logprobs, r.finish_reason)
        for r in rollouts
    ]
    batch = pack_episodes(episodes, torch.device("cpu"))
    with torch.no_grad():
        logits = packed_logits(model, batch)
    train = sampling_logprobs(logits, batch.labels.clamp(min=0), 0.7)[batch.response]
    recorded = batch.rollout_logp[batch.response]
    assert train.numel() == sum(len(r.token_ids) for r in rollouts)
    torch.testing.assert_close(train, recorded, rtol=0, atol=1e-4)


def test_every_model_turn_of_an_agentic_episode_is_on_policy_and_tool_tokens_are_context(
    model, prompts
) -> None:
    """Two model turns with a tool turn between (context tokens the model never sampled):
    the engine's log-probs of both turns equal the training forward's over the packed
    episode, and only the model's tokens are targets."""
    from schemas.chat_template import IGNORE_INDEX
    from training.packed_episodes import pack_episodes, packed_logits

    engine = engine_for(model, batch_size=2)
    sampling = SamplingParams(max_new_tokens=7, temperature=1.0, stop_token_ids=(VOCAB - 1,))
    prompt = prompts[0]
    first = next(engine.generate([rollout_request(0, prompt, sampling, 1)]))
    tool = [5, 6, 7, 8, 9]
    second = next(
        engine.generate([rollout_request(1, prompt + first.token_ids + tool, sampling, 2)])
    )
    response = first.token_ids + tool + second.token_ids
    mask = [True] * len(first.token_ids) + [False] * len(tool) + [True] * len(second.token_ids)
    logprobs = first.logprobs + [0.0] * len(tool) + second.logprobs
    episode = Episode(0, 0, "p", "think", prompt, response, logprobs, "stop", response_mask=mask)
    assert episode.model_tokens == len(first.token_ids) + len(second.token_ids)
    packed = pack_episodes([episode], torch.device("cpu"))
    with torch.no_grad():
        logits = packed_logits(model, packed)
    logp = sampling_logprobs(logits, packed.labels.clamp(min=0), 1.0)
    assert int(packed.response.sum()) == episode.model_tokens
    assert float((logp - packed.rollout_logp).abs()[packed.response].max()) < 1e-4
    labels = packed.labels[0].tolist()
    start = len(prompt) - 1 + len(first.token_ids)
    assert labels[start : start + len(tool)] == [IGNORE_INDEX] * len(tool)
    assert set(packed.length[0].tolist()) == {episode.model_tokens}


def test_an_episodes_next_turn_reuses_its_cached_turns_and_stays_on_policy(
    model, prompts, monkeypatch
) -> None:
    """From a feed, a turn whose prompt extends a finished row's tokens (the episode's earlier
    turns) takes that row's slot and prefills only the new tokens; its log-probs still equal
    the training forward's over the whole episode."""
    from schemas.generation import RequestFeed
    from training.packed_episodes import pack_episodes, packed_logits

    engine = engine_for(model, batch_size=2)
    offsets_seen: list[list[int]] = []
    prefill = engine._prefill

    def spy(cache, admitted, prompts_, offsets=None):
        offsets_seen.append(list(offsets or []))
        return prefill(cache, admitted, prompts_, offsets)

    monkeypatch.setattr(engine, "_prefill", spy)
    sampling = SamplingParams(max_new_tokens=6, temperature=1.0, stop_token_ids=(VOCAB - 1,))
    feed = RequestFeed(max_tokens=64, max_new_tokens=6)
    prompt, tool = prompts[1], [5, 6, 7]
    feed.put(rollout_request(0, prompt, sampling, 3))
    turns = engine.generate_feed(feed)
    first = next(turns)
    feed.put(rollout_request(1, prompt + first.token_ids + tool, sampling, 4))
    second = next(turns)
    feed.close()
    assert list(turns) == []
    assert offsets_seen == [[0], [len(prompt) + len(first.token_ids) - 1]]
    response = first.token_ids + tool + second.token_ids
    mask = [True] * len(first.token_ids) + [False] * len(tool) + [True] * len(second.token_ids)
    logprobs = first.logprobs + [0.0] * len(tool) + second.logprobs
    episode = Episode(0, 0, "p", "think", prompt, response, logprobs, "stop", response_mask=mask)
    packed = pack_episodes([episode], torch.device("cpu"))
    with torch.no_grad():
        logp = sampling_logprobs(packed_logits(model, packed), packed.labels.clamp(min=0), 1.0)
    assert float((logp - packed.rollout_logp).abs()[packed.response].max()) < 1e-4
