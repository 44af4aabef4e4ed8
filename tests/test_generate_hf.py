"""The transformers backend and generate_to_lake with tiny teachers built in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from curation.generate import (
    BackendError,
    GenerationRequest,
    SamplingParams,
    Teacher,
    generate_to_lake,
)
from curation.generate.backend import render_chat
from curation.generate.hf import HfBackend, completion_length
from curation.generate.plan import model_identity, prompts_from_records
from curation.generate.tiny_teacher import build_tiny_teacher
from lake.catalog import Lake
from schemas.generation import GENERATIONS

torch.set_num_threads(1)
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def math_rows(n: int, offset: int = 0) -> list[dict]:
    with open(SHARED / "sources" / "math_train.jsonl") as fh:
        rows = [json.loads(line) for _, line in zip(range(offset + n), fh, strict=False)]
    return rows[offset:]


@pytest.fixture(scope="module")
def random_teacher(tmp_path_factory: pytest.TempPathFactory) -> str:
    corpus = [r["problem"] for r in math_rows(300)]
    return str(build_tiny_teacher(tmp_path_factory.mktemp("random"), corpus))


@pytest.fixture(scope="module")
def trained_teacher(tmp_path_factory: pytest.TempPathFactory) -> str:
    rows = math_rows(300)
    return str(
        build_tiny_teacher(
            tmp_path_factory.mktemp("trained"),
            [r["problem"] for r in rows],
            train_on=[(r["problem"], r["answer"]) for r in rows],
            train_steps=80,
        )
    )


@pytest.fixture(scope="module")
def backend(random_teacher: str) -> HfBackend:
    return HfBackend(random_teacher, batch_size=4, num_threads=1)


def request(
    model: str, text: str, seed: int, sampling: SamplingParams, **kwargs
) -> GenerationRequest:
    chat = ({"role": "user", "content": text},)
    return GenerationRequest(f"{text[:20]}|{seed}", model, chat, sampling, seed, kwargs)


def test_prompts_render_with_the_teachers_template(backend: HfBackend) -> None:
    s = SamplingParams(max_new_tokens=4)
    thinking = render_chat(
        backend.tokenizer, request(backend.model, "2+2?", 0, s, enable_thinking=True)
    )
    plain = render_chat(
        backend.tokenizer, request(backend.model, "2+2?", 0, s, enable_thinking=False)
    )
    assert thinking == "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
    assert plain == thinking + "<think>\n\n</think>\n\n"


def test_a_sample_depends_on_its_seed_not_on_its_batch(backend: HfBackend) -> None:
    sampling = SamplingParams(max_new_tokens=12, temperature=1.0, top_p=0.9, top_k=50)
    texts = [r["problem"] for r in math_rows(5)]  # different lengths: left padding differs
    requests = [request(backend.model, t, seed, sampling) for t in texts for seed in (0, 1)]
    backend.batch_size = 1
    alone = {c.key: c.text for c in backend.generate(requests)}
    backend.batch_size = 4
    batched = {c.key: c.text for c in backend.generate(list(reversed(requests)))}
    assert alone == batched
    for text in texts:  # two seeds of one prompt give two different samples
        assert alone[f"{text[:20]}|0"] != alone[f"{text[:20]}|1"]


def test_greedy_ignores_the_seed(backend: HfBackend) -> None:
    greedy = SamplingParams(max_new_tokens=10, temperature=0.0)
    out = {
        c.key: c.text
        for c in backend.generate(
            [request(backend.model, "What is 7*6?", s, greedy) for s in (3, 4)]
        )
    }
    assert out["What is 7*6?|3"] == out["What is 7*6?|4"]


def test_token_counts_and_length_limit(backend: HfBackend) -> None:
    sampling = SamplingParams(max_new_tokens=6, temperature=1.0)
    req = request(backend.model, "Compute 17*23.", 5, sampling)
    (done,) = list(backend.generate([req]))
    prompt = render_chat(backend.tokenizer, req)
    assert done.prompt_tokens == len(backend.tokenizer(prompt, add_special_tokens=False).input_ids)
    if done.finish_reason == "length":
        assert done.completion_tokens == 6
    else:
        assert done.finish_reason == "stop" and done.completion_tokens <= 6


def test_completion_length_stops_at_first_end_token() -> None:
    assert completion_length([4, 9, 2, 0, 2], {2, 0}) == (3, "stop")
    assert completion_length([4, 9, 7], {2}) == (3, "length")
    assert completion_length([2], {2}) == (1, "stop")


def test_trained_teacher_responses_split_into_reasoning_and_answer(
    tmp_path: Path, trained_teacher: str
) -> None:
    lake = Lake(tmp_path / "lake")
    prompts = prompts_from_records(math_rows(6, offset=400), origin="math_train")
    report = generate_to_lake(
        lake,
        prompts,
        output="gens",
        teacher=Teacher(trained_teacher),
        backend="hf",
        backend_options={"batch_size": 8, "num_threads": 1},
        modes=["think", "no_think"],
        k=2,
        sampling=SamplingParams(max_new_tokens=64, temperature=0.7),
    )
    assert report.generated == 24
    rows = lake.read("gens").to_pylist()
    thinking = [r for r in rows if r["mode"] == "think"]
    plain = [r for r in rows if r["mode"] == "no_think"]
    # The teacher learned the response shape (not its content): the split follows its text.
    for row in thinking:
        body = row["response"].lstrip()
        if body.startswith("<think>") and "</think>" in body:
            reasoning, answer = body[len("<think>") :].split("</think>", 1)
            assert row["reasoning"] == (reasoning.strip() or None)
            assert row["final_answer"] == answer.strip()
        elif body.startswith("<think>"):
            assert row["final_answer"] == "" and row["truncated"]
    assert any(r["reasoning"] and not r["truncated"] for r in thinking), thinking
    # Non-thinking: the template pre-filled an empty think block, so unless the model opened
    # another one itself, there is no reasoning and the whole response is the answer.
    for row in plain:
        if "<think>" not in row["response"] and "</think>" not in row["response"]:
            assert row["reasoning"] is None and row["final_answer"] == row["response"].strip()
    assert any(r["reasoning"] is None and r["final_answer"] for r in plain)
    assert any(r["finish_reason"] == "stop" for r in rows)
    for row in rows:
        if row["finish_reason"] == "length":
            assert row["completion_tokens"] == 64 and row["truncated"]


def test_generate_to_lake_caches_by_fingerprint(tmp_path: Path, random_teacher: str) -> None:
    lake = Lake(tmp_path / "lake")
    prompts = prompts_from_records(math_rows(3), origin="math_train")
    kwargs = dict(
        output="gens",
        teacher=Teacher(random_teacher),
        backend="hf",
        backend_options={"batch_size": 4, "num_threads": 1},
        modes=["think", "no_think"],
        sampling=SamplingParams(max_new_tokens=5, temperature=1.0),
        chunk_size=4,
    )
    first = generate_to_lake(lake, prompts, k=2, **kwargs)
    assert (first.planned, first.cached, first.generated) == (12, 0, 12)
    assert len(first.versions) == 3  # chunks of 4
    table = lake.read("gens")
    GENERATIONS.validate(table.schema, "gens")
    rows = table.to_pylist()
    assert sorted((r["mode"], r["sample_index"], r["seed"]) for r in rows) == sorted(
        (m, i, i) for _ in range(3) for m in ("think", "no_think") for i in range(2)
    )
    assert {r["prompt_id"] for r in rows} == {p for p, _ in prompts}
    assert all(r["truncated"] == (r["finish_reason"] == "length") for r in rows)
    # rows name the local model by its directory's name and the hash of its files
    identity = model_identity(random_teacher)
    assert (
        identity.startswith(Path(random_teacher).name + "@") and len(identity.split("@")[1]) == 16
    )
    assert all(r["model"] == identity and r["backend"] == "hf" for r in rows)

    again = generate_to_lake(lake, prompts, k=2, **kwargs)
    assert (again.cached, again.generated, again.versions) == (12, 0, [])
    more = generate_to_lake(lake, prompts, k=3, **kwargs)  # only sample 2 of each is new
    assert (more.cached, more.generated) == (12, 6)
    rows = lake.read("gens").to_pylist()
    assert len(rows) == 18 and len({r["id"] for r in rows}) == 18
    # A cached sample is exactly what a fresh run would produce (seeded per sample).
    fresh = Lake(tmp_path / "fresh")
    generate_to_lake(fresh, prompts, k=3, **kwargs)
    by_id = {r["id"]: r["response"] for r in fresh.read("gens").to_pylist()}
    assert {r["id"]: r["response"] for r in rows} == by_id


def test_a_model_named_apart_from_its_directory_writes_the_same_rows_anywhere(
    tmp_path: Path, random_teacher: str
) -> None:
    """`backend_options={"path": DIR}` loads from DIR while rows and cache keys hold the
    model's name: two copies of one model in two places give one set of rows."""
    import shutil

    prompts = prompts_from_records(math_rows(2), origin="math_train")
    tables = []
    for place in ("a", "b"):
        copy = shutil.copytree(random_teacher, tmp_path / place / "weights")
        lake = Lake(tmp_path / place / "lake")
        generate_to_lake(
            lake,
            prompts,
            output="gens",
            teacher=Teacher("tiny-teacher@1234abcd"),
            backend="hf",
            backend_options={"batch_size": 4, "num_threads": 1, "path": str(copy)},
            modes=["think"],
            k=2,
            sampling=SamplingParams(max_new_tokens=5, temperature=1.0),
        )
        rows = lake.read("gens").to_pylist()
        assert {r["model"] for r in rows} == {"tiny-teacher@1234abcd"}
        assert not any(str(tmp_path) in json.dumps(r, default=str) for r in rows)
        tables.append(sorted(rows, key=lambda r: r["id"]))
    assert tables[0] == tables[1]

    # the same with the model given by its path: rows name it by its files, not where it is
    tables = []
    for place in ("a", "b"):
        lake = Lake(tmp_path / place / "lake2")
        generate_to_lake(
            lake,
            prompts,
            output="gens",
            teacher=Teacher(str(tmp_path / place / "weights")),
            backend="hf",
            backend_options={"batch_size": 4, "num_threads": 1},
            modes=["think"],
            k=2,
            sampling=SamplingParams(max_new_tokens=5, temperature=1.0),
        )
        rows = lake.read("gens").to_pylist()
        assert not any(str(tmp_path) in json.dumps(r, default=str) for r in rows)
        tables.append(sorted(rows, key=lambda r: r["id"]))
    assert tables[0] == tables[1] and tables[0][0]["model"].startswith("weights@")
    with pytest.raises(BackendError, match="directory .*nope does not exist"):
        HfBackend("named", path=str(tmp_path / "nope"))


def test_reasoning_opened_by_the_template_is_stored_as_reasoning(tmp_path: Path) -> None:
    corpus = [r["problem"] for r in math_rows(200)]
    r1 = str(build_tiny_teacher(tmp_path / "r1", corpus, template="r1"))
    lake = Lake(tmp_path / "lake")
    report = generate_to_lake(
        lake,
        prompts_from_records(math_rows(2), origin="m"),
        output="gens",
        teacher=Teacher(r1, mode_switch="model", no_think_model=r1),
        backend="hf",
        backend_options={"num_threads": 1},
        modes=["think"],
        k=1,
        sampling=SamplingParams(max_new_tokens=4, temperature=1.0),
    )
    assert report.generated == 2
    for row in lake.read("gens").to_pylist():
        if "</think>" in row["response"]:
            continue  # the random model happened to close it
        assert row["reasoning"] == (row["response"].strip() or None)
        assert row["final_answer"] == "" and row["truncated"]


def test_missing_model_directory_is_named(tmp_path: Path) -> None:
    from curation.generate import BackendError

    with pytest.raises(BackendError, match=f"model directory {tmp_path / 'nope'} does not exist"):
        HfBackend(str(tmp_path / "nope"))


def test_reasoning_markers_survive_decoding_when_the_tokenizer_marks_them_special(
    tmp_path: Path,
) -> None:
    # The trainer's tokenizers make <think> and </think> special tokens; decoding must keep
    # them (or the reasoning could not be told from the answer) and drop only the others.
    from training.models import build_model, train_bpe_tokenizer

    tokenizer = train_bpe_tokenizer(["What is 1 + 2? <think>1+2=3</think> \\boxed{3}"] * 20, 300)
    assert "<think>" in tokenizer.all_special_tokens
    overrides = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 64}  # fmt: skip
    model = build_model("tiny-random:qwen2", overrides, len(tokenizer), "eager", seed=0)
    model.save_pretrained(tmp_path / "m")
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    tokenizer.save_pretrained(tmp_path / "m")
    backend = HfBackend(str(tmp_path / "m"), batch_size=1, num_threads=1)
    ids = tokenizer("<think>1+2=3</think> \\boxed{3}", add_special_tokens=False)["input_ids"]
    kept = [t for t in ids + [tokenizer.pad_token_id] if t not in backend.hidden_ids]
    text = tokenizer.decode(kept, skip_special_tokens=False)
    assert text.startswith("<think>") and "</think>" in text and "<|endoftext|>" not in text


def test_a_local_models_identity_is_its_files(tmp_path: Path) -> None:
    import shutil

    model = tmp_path / "a" / "final"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"hidden_size": 8}')
    (model / "model.safetensors").write_bytes(b"weights")
    (model / "trained_on.json").write_text('{"when": "now", "lake": "/here"}')
    first = model_identity(str(model))
    copy = shutil.copytree(model, tmp_path / "b" / "final")
    (copy / "trained_on.json").write_text('{"when": "later", "lake": "/there"}')
    assert model_identity(str(copy)) == first and first.startswith("final@")
    (copy / "model.safetensors").write_bytes(b"other weights")
    assert model_identity(str(copy)) != first
    assert model_identity("Qwen/Qwen3-8B") == "Qwen/Qwen3-8B"  # hub ids stay as given
