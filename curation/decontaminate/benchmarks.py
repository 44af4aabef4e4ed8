"""Benchmark registry: the named test sets that training data is decontaminated against.

Each entry says where a benchmark lives on the HF Hub (dataset id, config, split, text and id
fields) and, for a local copy, which jsonl file and fields hold the same items. A benchmark is
loaded from a local directory of jsonl when one is given (offline, pinned by content hash) or
from the Hub by dataset id for users with network. Every loaded benchmark carries a sha256 of
its (id, text) items so a dataset manifest can say exactly what it was checked against.

    >>> load_benchmarks("aime24,math500", local_dir="../shared/data/benchmarks")  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCHMARK_DIR_ENV = "CASCADE_BENCHMARK_DIR"


@dataclass(frozen=True)
class BenchmarkSpec:
    """Where one benchmark's items live and which fields hold their text and id.

    `text_fields` are joined with a blank line when several are given (e.g. a code task's
    prompt); `id_field=None` means items are identified by their 0-based position.
    """

    name: str
    domain: str
    hub_id: str | None
    hub_split: str = "test"
    hub_config: str | None = None
    hub_text_fields: tuple[str, ...] = ("problem",)
    hub_id_field: str | None = None
    hub_kwargs: tuple[tuple[str, Any], ...] = ()
    local_file: str | None = None
    text_fields: tuple[str, ...] = ("problem",)
    id_field: str | None = None
    aliases: tuple[str, ...] = ()


REGISTRY: dict[str, BenchmarkSpec] = {
    spec.name: spec
    for spec in (
        BenchmarkSpec(
            name="aime24",
            domain="math",
            hub_id="HuggingFaceH4/aime_2024",
            hub_split="train",
            hub_id_field="id",
            local_file="aime24.jsonl",
            id_field="id",
            aliases=("aime_2024", "aime2024"),
        ),
        BenchmarkSpec(
            name="aime25",
            domain="math",
            hub_id="yentinglin/aime_2025",
            hub_split="train",
            hub_id_field="id",
            local_file="aime25.jsonl",
            id_field="id",
            aliases=("aime_2025", "aime2025"),
        ),
        BenchmarkSpec(
            name="amc",
            domain="math",
            hub_id="AI-MO/aimo-validation-amc",
            hub_split="train",
            hub_id_field="id",
            local_file="amc22_23.jsonl",
            id_field="url",
            aliases=("amc22_23", "amc23"),
        ),
        BenchmarkSpec(
            name="math500",
            domain="math",
            hub_id="HuggingFaceH4/MATH-500",
            hub_id_field="unique_id",
            local_file="math500.jsonl",
            id_field="unique_id",
            aliases=("math_500", "math-500"),
        ),
        BenchmarkSpec(
            name="minerva",
            domain="math",
            hub_id="math-ai/minervamath",
            hub_text_fields=("question",),
            local_file="minerva_math.jsonl",
            id_field="idx",
            aliases=("minerva_math",),
        ),
        BenchmarkSpec(
            name="olympiadbench",
            domain="math",
            hub_id="Hothan/OlympiadBench",
            hub_config="OE_TO_maths_en_COMP",
            hub_split="train",
            hub_text_fields=("question",),
            hub_id_field="id",
            local_file="olympiadbench.jsonl",
            id_field="id",
            aliases=("olympiad_bench",),
        ),
        BenchmarkSpec(
            name="gsm8k",
            domain="math",
            hub_id="openai/gsm8k",
            hub_config="main",
            hub_text_fields=("question",),
            local_file="gsm8k_test.jsonl",
            text_fields=("question",),
            aliases=("gsm8k_test",),
        ),
        BenchmarkSpec(
            name="humaneval",
            domain="code",
            hub_id="openai/openai_humaneval",
            hub_text_fields=("prompt",),
            hub_id_field="task_id",
            local_file="humaneval.jsonl",
            text_fields=("prompt",),
            id_field="task_id",
        ),
        BenchmarkSpec(
            name="ifeval",
            domain="if",
            hub_id="google/IFEval",
            hub_split="train",
            hub_text_fields=("prompt",),
            hub_id_field="key",
            local_file="ifeval.jsonl",
            text_fields=("prompt",),
            id_field="key",
        ),
        BenchmarkSpec(
            name="ifbench",
            domain="if",
            hub_id="allenai/IFBench_test",
            hub_split="train",
            hub_text_fields=("prompt",),
            hub_id_field="key",
            local_file="ifbench.jsonl",
            text_fields=("prompt",),
            id_field="key",
        ),
        BenchmarkSpec(
            name="gpqa_diamond",
            domain="science",
            hub_id="Idavidrein/gpqa",
            hub_config="gpqa_diamond",
            hub_split="train",
            hub_text_fields=("Question",),
            hub_id_field="Record ID",
            aliases=("gpqa", "gpqa-diamond"),
        ),
        BenchmarkSpec(
            name="livecodebench",
            domain="code",
            hub_id="livecodebench/code_generation_lite",
            hub_text_fields=("question_content",),
            hub_id_field="question_id",
            hub_kwargs=(("version_tag", "release_v5"), ("trust_remote_code", True)),
            aliases=("lcb",),
        ),
        BenchmarkSpec(
            name="codeforces",
            domain="code",
            hub_id=None,
            local_file="codeforces_test.jsonl",
            aliases=("codeforces_test",),
        ),
        BenchmarkSpec(
            name="code_contests",
            domain="code",
            hub_id="deepmind/code_contests",
            hub_text_fields=("description",),
            hub_id_field="name",
            local_file="code_contests_test.jsonl",
            aliases=("code_contests_test",),
        ),
        BenchmarkSpec(
            name="leetcode",
            domain="code",
            hub_id=None,
            local_file="leetcode_test.jsonl",
            aliases=("leetcode_test",),
        ),
    )
}

# The sets the Math RL recipe checks by default (cascade-recipe.md §6: AIME 24/25 and MATH,
# plus AMC, Minerva and OlympiadBench, which the model is evaluated on).
MATH_RL_DEFAULT = ("aime24", "aime25", "amc", "math500", "minerva", "olympiadbench")


@dataclass
class Benchmark:
    """One loaded test set: item ids and texts in source order, plus where it came from."""

    name: str
    ids: list[str]
    texts: list[str]
    origin: str
    domain: str = "unknown"
    content_hash: str = field(init=False)

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.texts):
            raise ValueError(
                f"benchmark {self.name!r}: {len(self.ids)} ids for {len(self.texts)} texts"
            )
        self.content_hash = content_hash(self.ids, self.texts)

    def __len__(self) -> int:
        return len(self.texts)

    def manifest_entry(self) -> dict[str, object]:
        """What a dataset manifest records about this benchmark."""
        return {
            "name": self.name,
            "origin": self.origin,
            "items": len(self),
            "content_hash": self.content_hash,
        }


def content_hash(ids: Sequence[str], texts: Sequence[str]) -> str:
    """sha256 of the (id, text) items in order, as canonical JSON lines."""
    digest = hashlib.sha256()
    for item_id, text in zip(ids, texts, strict=True):
        digest.update(json.dumps([item_id, text], ensure_ascii=False).encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()


def resolve_name(name: str) -> BenchmarkSpec:
    """Registry entry for a name or alias; ValueError lists the known names."""
    key = name.strip().lower()
    for spec in REGISTRY.values():
        if key == spec.name or key in spec.aliases:
            return spec
    raise ValueError(f"unknown benchmark {name!r}; known: {', '.join(sorted(REGISTRY))}")


def _item_text(record: dict[str, Any], fields: tuple[str, ...], where: str) -> str:
    parts = []
    for name in fields:
        if name not in record:
            raise ValueError(f"{where}: missing text field {name!r} (fields: {sorted(record)})")
        value = record[name]
        if not isinstance(value, str):
            raise ValueError(
                f"{where}: field {name!r} is {type(value).__name__}, expected a string"
            )
        parts.append(value)
    return "\n\n".join(parts)


def load_jsonl_benchmark(path: str | Path, spec: BenchmarkSpec | None = None) -> Benchmark:
    """Load one local jsonl benchmark; an unregistered file must have a `problem` field.

    Errors name the file, line and field.
    """
    path = Path(path)
    unregistered = False
    if spec is None:
        try:
            spec = resolve_name(path.stem)
        except ValueError:
            spec = BenchmarkSpec(name=path.stem, domain="unknown", hub_id=None)
            unregistered = True
    ids: list[str] = []
    texts: list[str] = []
    with path.open(encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}:{line_no}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: not valid JSON ({exc.msg})") from None
            if not isinstance(record, dict):
                raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
            texts.append(_item_text(record, spec.text_fields, where))
            if spec.id_field is None and unregistered and record.get("id") is not None:
                ids.append(str(record["id"]))  # an unregistered file's own ids, if it has them
            elif spec.id_field is None:
                ids.append(f"{spec.name}-{len(ids)}")
            elif spec.id_field not in record or record[spec.id_field] is None:
                raise ValueError(f"{where}: missing id field {spec.id_field!r}")
            else:
                ids.append(str(record[spec.id_field]))
    if not texts:
        raise ValueError(f"{path}: benchmark file has no items")
    return Benchmark(spec.name, ids, texts, origin=str(path), domain=spec.domain)


def hub_dataset(spec: BenchmarkSpec) -> Any:
    """A benchmark's split from the HF Hub with `datasets.load_dataset` (needs network)."""
    if spec.hub_id is None:
        raise ValueError(f"benchmark {spec.name!r} has no Hub dataset id; give a local directory")
    import datasets

    try:
        return datasets.load_dataset(
            spec.hub_id, spec.hub_config, split=spec.hub_split, **dict(spec.hub_kwargs)
        )
    except Exception as exc:  # network, auth, missing config: one sentence for the user
        raise FileNotFoundError(
            f"benchmark {spec.name!r}: loading {spec.hub_id} from the HF Hub failed "
            f"({type(exc).__name__}); give a local directory of benchmark jsonl instead"
        ) from exc


def load_hub_benchmark(spec: BenchmarkSpec) -> Benchmark:
    """Load a benchmark's ids and texts from the HF Hub (see `hub_dataset`)."""
    ds = hub_dataset(spec)
    ids: list[str] = []
    texts: list[str] = []
    for index, record in enumerate(ds):
        where = f"{spec.hub_id} ({spec.hub_split}) row {index}"
        texts.append(_item_text(record, spec.hub_text_fields, where))
        if spec.hub_id_field is None or record.get(spec.hub_id_field) is None:
            ids.append(f"{spec.name}-{index}")
        else:
            ids.append(str(record[spec.hub_id_field]))
    origin = f"hf://{spec.hub_id}" + (f"/{spec.hub_config}" if spec.hub_config else "")
    return Benchmark(spec.name, ids, texts, origin=f"{origin}:{spec.hub_split}", domain=spec.domain)


def load_benchmark(
    name: str, local_dir: str | Path | None = None, allow_hub: bool = True
) -> Benchmark:
    """Load a registered benchmark: the local copy in `local_dir` if present, else the Hub."""
    spec = resolve_name(name)
    local_dir = local_dir or os.environ.get(BENCHMARK_DIR_ENV)
    if local_dir is not None and spec.local_file is not None:
        path = Path(local_dir) / spec.local_file
        if path.exists():
            return load_jsonl_benchmark(path, spec)
    if not allow_hub:
        raise FileNotFoundError(
            f"benchmark {spec.name!r}: no local copy {spec.local_file!r} in {local_dir} "
            "and Hub loading is off"
        )
    return load_hub_benchmark(spec)


def load_benchmark_dir(
    directory: str | Path, names: Iterable[str] | None = None
) -> list[Benchmark]:
    """Load every `*.jsonl` in a directory (or only the registered `names` found there)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"benchmark directory {directory} does not exist")
    if names is not None:
        return [load_benchmark(n, local_dir=directory, allow_hub=False) for n in names]
    files = sorted(directory.glob("*.jsonl"))
    if not files:
        raise FileNotFoundError(f"benchmark directory {directory} holds no *.jsonl files")
    return [load_jsonl_benchmark(path) for path in files]


def load_benchmarks(
    spec: str | Sequence[str], local_dir: str | Path | None = None, allow_hub: bool = True
) -> list[Benchmark]:
    """Load benchmarks from a spec: a directory, a jsonl file, or registered names.

    `spec` is one string (comma-separated allowed) or a list; each part is a directory (all
    its jsonl files), a `.jsonl` path, or a registry name resolved in `local_dir` (or
    $CASCADE_BENCHMARK_DIR) first and the Hub second.
    """
    parts = [spec] if isinstance(spec, str) else list(spec)
    items = [p.strip() for part in parts for p in str(part).split(",") if p.strip()]
    if not items:
        raise ValueError("no benchmarks given")
    loaded: list[Benchmark] = []
    for item in items:
        path = Path(item)
        if path.is_dir():
            loaded.extend(load_benchmark_dir(path))
        elif item.endswith(".jsonl"):
            if not path.exists():
                raise FileNotFoundError(f"benchmark file {path} does not exist")
            loaded.append(load_jsonl_benchmark(path))
        else:
            loaded.append(load_benchmark(item, local_dir=local_dir, allow_hub=allow_hub))
    names = [b.name for b in loaded]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"benchmark(s) given twice: {', '.join(duplicates)}")
    return loaded
