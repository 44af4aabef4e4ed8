"""The benchmark registry: entries, local loading, Hub loading, content hashes, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from curation.decontaminate import benchmarks as bm
from curation.decontaminate.benchmarks import (
    REGISTRY,
    Benchmark,
    load_benchmark,
    load_benchmarks,
    load_jsonl_benchmark,
    resolve_name,
)

SHARED_BENCHMARKS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "benchmarks"

# Item counts of the local copies, as listed in ../shared/data/README.md.
LOCAL_COUNTS = {
    "aime24": 30,
    "aime25": 30,
    "amc": 83,
    "math500": 500,
    "minerva": 272,
    "olympiadbench": 675,
    "gsm8k": 1319,
    "humaneval": 164,
    "ifeval": 541,
    "codeforces": 408,
    "code_contests": 165,
    "leetcode": 200,
}


def test_registry_names_every_required_benchmark_with_hub_id_and_text_field() -> None:
    required = {
        "aime24": "HuggingFaceH4/aime_2024",
        "aime25": "yentinglin/aime_2025",
        "amc": "AI-MO/aimo-validation-amc",
        "math500": "HuggingFaceH4/MATH-500",
        "minerva": "math-ai/minervamath",
        "olympiadbench": "Hothan/OlympiadBench",
        "gsm8k": "openai/gsm8k",
        "humaneval": "openai/openai_humaneval",
        "ifeval": "google/IFEval",
        "gpqa_diamond": "Idavidrein/gpqa",
        "livecodebench": "livecodebench/code_generation_lite",
    }
    for name, hub_id in required.items():
        spec = REGISTRY[name]
        assert spec.hub_id == hub_id
        assert spec.hub_text_fields and all(spec.hub_text_fields)
    assert resolve_name("AIME_2024").name == "aime24"
    assert resolve_name("math-500").name == "math500"
    assert resolve_name("lcb").name == "livecodebench"


@pytest.mark.parametrize("name", sorted(LOCAL_COUNTS))
def test_local_copies_load_with_unique_ids_and_nonempty_texts(name: str) -> None:
    (bench,) = load_benchmarks(name, local_dir=SHARED_BENCHMARKS, allow_hub=False)
    assert bench.name == name
    assert len(bench) == LOCAL_COUNTS[name]
    assert len(set(bench.ids)) == len(bench.ids)
    assert all(text.strip() for text in bench.texts)
    assert bench.origin == str(SHARED_BENCHMARKS / REGISTRY[name].local_file)


def test_known_items_and_ids_of_the_local_copies() -> None:
    aime24, math500, gsm8k = load_benchmarks(
        "aime24,math500,gsm8k", local_dir=SHARED_BENCHMARKS, allow_hub=False
    )
    assert aime24.ids[0] == "aime24-0"
    assert aime24.texts[0].startswith("Among the 900 residents of Aimeville")
    assert math500.ids[0] == "test/precalculus/807.json"
    assert gsm8k.ids[0] == "gsm8k-0"  # no id field: position
    assert gsm8k.texts[0].startswith("Janet")


def test_directory_spec_loads_every_jsonl_and_names_them_by_registry() -> None:
    loaded = load_benchmarks(str(SHARED_BENCHMARKS))
    assert {b.name for b in loaded} == set(LOCAL_COUNTS)


def test_content_hash_is_stable_and_changes_with_any_item(tmp_path: Path) -> None:
    (first,) = load_benchmarks("amc", local_dir=SHARED_BENCHMARKS, allow_hub=False)
    (again,) = load_benchmarks("amc", local_dir=SHARED_BENCHMARKS, allow_hub=False)
    assert first.content_hash == again.content_hash and len(first.content_hash) == 64
    changed = Benchmark("amc", first.ids, [*first.texts[:-1], first.texts[-1] + " "], "x")
    assert changed.content_hash != first.content_hash
    entry = first.manifest_entry()
    assert entry == {
        "name": "amc",
        "origin": first.origin,
        "items": 83,
        "content_hash": first.content_hash,
    }


def test_env_var_points_names_at_a_local_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(bm.BENCHMARK_DIR_ENV, str(SHARED_BENCHMARKS))
    assert len(load_benchmark("aime25", allow_hub=False)) == 30


def test_missing_local_copy_without_hub_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no local copy 'aime24.jsonl'"):
        load_benchmark("aime24", local_dir=tmp_path, allow_hub=False)
    with pytest.raises(ValueError, match="unknown benchmark 'aime2099'; known: aime24"):
        load_benchmarks("aime2099", local_dir=tmp_path)
    with pytest.raises(ValueError, match="given twice: aime24"):
        load_benchmarks(["aime24", "aime_2024"], local_dir=SHARED_BENCHMARKS, allow_hub=False)


def test_bad_jsonl_is_reported_by_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "mine.jsonl"
    path.write_text('{"problem": "ok"}\n{"problem": \n')
    with pytest.raises(ValueError, match=r"mine.jsonl:2: not valid JSON"):
        load_jsonl_benchmark(path)
    path.write_text('{"problem": "ok"}\n{"question": "x"}\n')
    with pytest.raises(ValueError, match=r"mine.jsonl:2: missing text field 'problem'"):
        load_jsonl_benchmark(path)
    path.write_text('{"problem": 3}\n')
    with pytest.raises(ValueError, match=r"mine.jsonl:1: field 'problem' is int"):
        load_jsonl_benchmark(path)
    path.write_text("\n")
    with pytest.raises(ValueError, match="no items"):
        load_jsonl_benchmark(path)


def test_unregistered_jsonl_file_is_a_benchmark_named_by_its_stem(tmp_path: Path) -> None:
    path = tmp_path / "house_set.jsonl"
    path.write_text("".join(json.dumps({"problem": f"Problem {i}."}) + "\n" for i in range(3)))
    (bench,) = load_benchmarks(str(path))
    assert bench.name == "house_set"
    assert bench.ids == ["house_set-0", "house_set-1", "house_set-2"]


def test_hub_path_calls_load_dataset_with_the_registry_entry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import datasets

    calls: list[tuple] = []

    def fake_load_dataset(path: str, name: str | None = None, split: str | None = None, **kw):
        calls.append((path, name, split, kw))
        return datasets.Dataset.from_dict(
            {"Question": ["What is a quark?", "Why is the sky blue?"], "Record ID": ["r1", "r2"]}
        )

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    bench = load_benchmark("gpqa")
    assert calls == [("Idavidrein/gpqa", "gpqa_diamond", "train", {})]
    assert bench.name == "gpqa_diamond"
    assert bench.ids == ["r1", "r2"]
    assert bench.texts == ["What is a quark?", "Why is the sky blue?"]
    assert bench.origin == "hf://Idavidrein/gpqa/gpqa_diamond:train"

    def offline(*args: object, **kwargs: object) -> None:
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(FileNotFoundError, match="loading openai/gsm8k from the HF Hub failed"):
        load_benchmark("gsm8k")
