"""The vLLM backend; runs only where vllm imports (never on the CPU development machines).

The pure part (folding consecutive seeds into one request) is tested in
test_generate_plan.py; here the real `vllm.SamplingParams` are built, and where a GPU is
present a tiny model is generated with end to end and checked against the seeds' contract.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

vllm = pytest.importorskip("vllm")

from curation.generate import SamplingParams, Teacher, plan_jobs  # noqa: E402
from curation.generate.vllm import VllmBackend, sampling_params_for, seed_runs  # noqa: E402

CHAT = ({"role": "user", "content": "What is 2+2?"},)


def test_sampling_params_carry_n_seed_and_limits() -> None:
    sampling = SamplingParams(max_new_tokens=32, temperature=0.6, top_p=0.95, top_k=0)
    jobs = plan_jobs([("p", CHAT)], Teacher("m"), modes=["think"], k=4, sampling=sampling,
                     seed=10)  # fmt: skip
    (run,) = seed_runs([j.request for j in jobs])
    params = sampling_params_for(run)
    assert isinstance(params, vllm.SamplingParams)
    assert (params.n, params.seed, params.max_tokens) == (4, 10, 32)
    assert params.temperature == pytest.approx(0.6) and params.top_p == pytest.approx(0.95)
    assert params.top_k in (-1, 0)  # disabled, spelled per vLLM version


def test_end_to_end_on_a_gpu(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("vLLM needs a GPU here")
    from curation.generate.tiny_teacher import build_tiny_teacher

    shared = Path(__file__).resolve().parents[1].parent / "shared" / "data"
    with open(shared / "sources" / "math_train.jsonl") as fh:
        corpus = [json.loads(line)["problem"] for _, line in zip(range(300), fh, strict=False)]
    model = str(build_tiny_teacher(tmp_path / "teacher", corpus))
    backend = VllmBackend(model, max_model_len=1024, gpu_memory_utilization=0.3)
    sampling = SamplingParams(max_new_tokens=8, temperature=1.0)
    jobs = plan_jobs([("p", CHAT)], Teacher(model), modes=["think"], k=3, sampling=sampling)
    done = {c.key: c for c in backend.generate([j.request for j in jobs])}
    assert set(done) == {j.request.key for j in jobs}
    assert all(c.completion_tokens <= 8 and c.finish_reason in ("stop", "length")
               for c in done.values())  # fmt: skip
    # Sample 1 alone (seed 1) equals sample 1 of the n=3 request: vLLM seeds child i by seed+i.
    (alone,) = list(backend.generate([jobs[1].request]))
    assert alone.text == done[jobs[1].request.key].text
    backend.close()
