"""The generation cache key is pinned: these ids are what today's lakes hold.

A row's `id` in the generations table is the fingerprint `plan_jobs` gives its request; a
refactor that changed it would make every lake regenerate (and re-pay for) its teacher
samples. If a change here is ever meant, it needs a migration, not a new expected value.
"""

from __future__ import annotations

from curation.generate import SamplingParams, Teacher, plan_jobs

CHAT = (
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "What is 2+2? Réponds en français."},
)


def keys(teacher: Teacher, sampling: SamplingParams, seed: int = 0) -> list[str]:
    jobs = plan_jobs(
        [("p", CHAT)], teacher, modes=["think", "no_think"], k=2, sampling=sampling, seed=seed
    )
    return [job.request.key for job in jobs]


def test_template_switch_keys() -> None:
    assert keys(Teacher("Qwen/Qwen3-8B"), SamplingParams()) == EXPECTED["template"]


def test_flag_switch_keys() -> None:
    sampling = SamplingParams(max_new_tokens=64, temperature=1.0, top_p=0.9, top_k=20)
    assert keys(Teacher("m", mode_switch="flag"), sampling, seed=7) == EXPECTED["flag"]


def test_model_switch_keys() -> None:
    teacher = Teacher("deepseek-r1", mode_switch="model", no_think_model="deepseek-v3")
    sampling = SamplingParams(max_new_tokens=32768, temperature=0.0, top_p=1.0)
    assert keys(teacher, sampling, seed=3) == EXPECTED["model"]


EXPECTED: dict[str, list[str]] = {
    "template": [
        "fec7e70efbf9bd9f6500260f89d13d8b",
        "cfd25272783931f06f303a03f4864deb",
        "5abf69d49e083cc691da9fc0b93edfac",
        "0607ff201773d17b58b76220673c638f",
    ],
    "flag": [
        "b20483b1c7897907dd228ca511e87c7a",
        "ae272fbf8aa5d9383219e87033318cda",
        "c0a560cc2ab04f3cc55e1d1379ff61bb",
        "af3dc94eebf14b1ed51a22f441552ec2",
    ],
    "model": [
        "70bbfc1a3c5de74be081309f4ea7ca4a",
        "e366710a0d473aae47e1e36c896d8ea6",
        "9b7d914f1ec2d610d18e6484832949e9",
        "034c6647f6cedaf72048cbc0eb55ebad",
    ],
}
