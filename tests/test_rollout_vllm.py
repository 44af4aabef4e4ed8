"""The optional `vllm` rollout engine: what can be checked without vLLM (request -> sampling
arguments, outputs -> Rollouts, the error when it is missing) always runs; the engine itself
runs only where vllm is importable (a GPU machine with the extra installed).
"""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest

from training.rollout import RolloutRequest, SamplingParams, make_rollout_engine
from training.rollout.vllm import rollout_from_output, sampling_kwargs

HAS_VLLM = importlib.util.find_spec("vllm") is not None


def test_sampling_arguments_per_request() -> None:
    sampling = SamplingParams(
        max_new_tokens=64, temperature=0.6, top_p=0.95, top_k=0, stop_token_ids=(7, 9)
    )
    kwargs = sampling_kwargs(sampling, RolloutRequest(3, [1, 2], seed=1234, max_new_tokens=16))
    assert kwargs == {
        "n": 1,
        "temperature": 0.6,
        "top_p": 0.95,
        "top_k": -1,  # vLLM's "off"
        "max_tokens": 16,
        "seed": 1234,
        "stop_token_ids": [7, 9],
        "logprobs": 0,
        "detokenize": False,
    }
    capped = sampling_kwargs(
        SamplingParams(max_new_tokens=8, top_k=20, stop_token_ids=(7,)),
        RolloutRequest(0, [1], seed=0, max_new_tokens=100),
    )
    assert (capped["max_tokens"], capped["top_k"]) == (8, 20)


def fake_output(tokens: list[int], finish: str, stop_reason: object = None):
    steps = [{t: SimpleNamespace(logprob=-0.5 * (i + 1))} for i, t in enumerate(tokens)]
    completion = SimpleNamespace(
        token_ids=tokens, logprobs=steps, finish_reason=finish, stop_reason=stop_reason
    )
    return SimpleNamespace(outputs=[completion])


def test_outputs_become_rollouts() -> None:
    stopped = rollout_from_output(4, fake_output([5, 6, 7], "stop", 7), (7,))
    assert (stopped.key, stopped.token_ids, stopped.finish_reason) == (4, [5, 6, 7], "stop")
    assert stopped.logprobs == [-0.5, -1.0, -1.5]
    capped = rollout_from_output(5, fake_output([5, 6], "length"), (7,))
    assert capped.finish_reason == "length"
    with pytest.raises(ValueError, match="stopped on 'END'"):
        rollout_from_output(6, fake_output([5, 6], "stop", "END"), (7,))


@pytest.mark.skipif(HAS_VLLM, reason="vllm is installed here")
def test_missing_vllm_is_one_clear_error() -> None:
    import torch

    with pytest.raises(ImportError, match="optional vllm package"):
        make_rollout_engine("vllm", torch.nn.Linear(1, 1), batch_size=1, model_dir="/nonexistent")


@pytest.mark.skipif(not HAS_VLLM, reason="vllm is not installed (optional extra, GPU only)")
def test_vllm_engine_greedy_matches_hf_engine(tmp_path) -> None:  # pragma: no cover - GPU only
    import torch

    from training.models import build_model, train_bpe_tokenizer
    from training.rollout.hf import HfEngine

    tokenizer = train_bpe_tokenizer(["hello world"], 300)
    model = build_model("tiny-random:qwen2", None, len(tokenizer), "sdpa", seed=0)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    engine = make_rollout_engine("vllm", model, batch_size=4, model_dir=str(tmp_path))
    hf = HfEngine.from_policy(model.cuda(), batch_size=4)
    hf.load_weights(model.named_parameters())
    sampling = SamplingParams(max_new_tokens=8, temperature=0, stop_token_ids=(1,))
    requests = [RolloutRequest(i, [5 + i, 9, 11], seed=i) for i in range(4)]
    got = {r.key: r.token_ids for r in engine.generate(requests, sampling)}
    want = {r.key: r.token_ids for r in hf.generate(requests, sampling)}
    assert got == want
    engine.load_weights((n, torch.zeros_like(p)) for n, p in model.named_parameters())
