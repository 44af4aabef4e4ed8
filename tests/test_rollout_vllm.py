"""The optional `vllm` rollout engine: what can be checked without vLLM (request -> sampling
arguments, outputs -> Completions, the error when it is missing) always runs; the engine itself
runs only where vllm is importable (a GPU machine with the extra installed).
"""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest

from schemas.generation import SamplingParams
from training.rollout import make_rollout_engine, rollout_request
from training.rollout.vllm import completion_from_output, sampling_kwargs

HAS_VLLM = importlib.util.find_spec("vllm") is not None


def test_sampling_arguments_per_request() -> None:
    sampling = SamplingParams(
        max_new_tokens=16, temperature=0.6, top_p=0.95, top_k=0, stop_token_ids=(7, 9)
    )
    kwargs = sampling_kwargs(rollout_request(3, [1, 2], sampling, seed=1234))
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
    top_k = sampling_kwargs(
        rollout_request(0, [1], SamplingParams(max_new_tokens=8, top_k=20, stop_token_ids=(7,)), 0)
    )
    assert (top_k["max_tokens"], top_k["top_k"]) == (8, 20)


def fake_output(tokens: list[int], finish: str, stop_reason: object = None):
    steps = [{t: SimpleNamespace(logprob=-0.5 * (i + 1))} for i, t in enumerate(tokens)]
    completion = SimpleNamespace(
        token_ids=tokens, logprobs=steps, finish_reason=finish, stop_reason=stop_reason
    )
    return SimpleNamespace(outputs=[completion])


def test_outputs_become_completions() -> None:
    sampling = SamplingParams(max_new_tokens=8, stop_token_ids=(7,))

    def request(key: int):
        return rollout_request(key, [1, 2], sampling, seed=0)

    stopped = completion_from_output(request(4), fake_output([5, 6, 7], "stop", 7))
    assert (stopped.key, stopped.token_ids, stopped.finish_reason) == (4, [5, 6, 7], "stop")
    assert stopped.logprobs == [-0.5, -1.0, -1.5]
    assert (stopped.prompt_tokens, stopped.completion_tokens) == (2, 3)
    capped = completion_from_output(request(5), fake_output([5, 6], "length"))
    assert capped.finish_reason == "length"
    with pytest.raises(ValueError, match="stopped on 'END'"):
        completion_from_output(request(6), fake_output([5, 6], "stop", "END"))


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
    requests = [rollout_request(i, [5 + i, 9, 11], sampling, seed=i) for i in range(4)]
    got = {r.key: r.token_ids for r in engine.generate(requests)}
    want = {r.key: r.token_ids for r in hf.generate(requests)}
    assert got == want
    engine.load_weights((n, torch.zeros_like(p)) for n, p in model.named_parameters())
