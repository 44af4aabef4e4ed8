"""The benchmarks `cascade eval` scores: for each, the prompt a model sees, the reference its
verifier reads, and which verifier (a kind of the reward registry).

Items are read where decontamination reads them (`curation.decontaminate.benchmarks`: the
local jsonl copy in a benchmark directory, else the HF Hub), and an evaluation records the
same content hash a dataset manifest records for the benchmarks its build was kept apart
from, so the two can be compared exactly.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl
import xxhash

from curation.decontaminate.benchmarks import (
    BENCHMARK_DIR_ENV,
    BenchmarkSpec,
    content_hash,
    hub_dataset,
    resolve_name,
)
from lake.files import json_lines

if TYPE_CHECKING:
    from lake.catalog import Lake

MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
STDIO_INSTRUCTION = (
    "Solve the problem in Python 3: read from standard input, write to standard output, and "
    "give the whole program in one ```python code block."
)
FUNCTION_INSTRUCTION = (
    "Complete the function below in Python 3. Give the whole function, with its imports, in "
    "one ```python code block."
)


@dataclass(frozen=True)
class EvalBenchmark:
    """How one registered benchmark is evaluated: `prompt(record)` is the user turn,
    `reference(record)` the columns its `verifier` reads (`answer`, `tests`, or IFEval's
    `instruction_id_list` + `kwargs`), `group` the preset setting it takes (math, code, if)."""

    name: str
    verifier: str
    group: str
    prompt: Callable[[dict[str, Any]], str]
    reference: Callable[[dict[str, Any]], dict[str, Any]]


def _math_prompt(field: str) -> Callable[[dict[str, Any]], str]:
    return lambda r: f"{r[field]}\n\n{MATH_INSTRUCTION}"


def _answer(field: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The answer of a math item as a string: numbers without a trailing `.0`, lists stored
    as their Python text (Minerva, OlympiadBench) joined with commas."""

    def read(record: dict[str, Any]) -> dict[str, Any]:
        value = record[field]
        if isinstance(value, str) and value.strip().startswith("["):
            with contextlib.suppress(ValueError, SyntaxError):
                value = ast.literal_eval(value.strip())
        if isinstance(value, list):
            value = ", ".join(str(v).strip() for v in value)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return {"answer": str(value).strip()}

    return read


def _gsm8k_answer(record: dict[str, Any]) -> dict[str, Any]:
    return {"answer": str(record["answer"]).split("####")[-1].strip().replace(",", "")}


def _stdio_prompt(record: dict[str, Any]) -> str:
    return f"{str(record['problem']).strip()}\n\n{STDIO_INSTRUCTION}"


def _tests(record: dict[str, Any]) -> dict[str, Any]:
    tests = record["tests"]
    return {"tests": tests if isinstance(tests, str) else json.dumps(tests)}


def _humaneval_prompt(record: dict[str, Any]) -> str:
    return f"{FUNCTION_INSTRUCTION}\n\n```python\n{record['prompt']}```"


def _humaneval_tests(record: dict[str, Any]) -> dict[str, Any]:
    return {"tests": json.dumps({"test": record["test"], "entry_point": record["entry_point"]})}


CHOICE_INSTRUCTION = "Answer with the letter of the correct option, ending with `Answer: X`."


def _gpqa_options(record: dict[str, Any]) -> tuple[list[str], str]:
    """GPQA's four answers in an order fixed by the item (a hash of its id and each answer),
    so every run and every model sees the same letters; and the correct one's letter."""
    correct = str(record["Correct Answer"]).strip()
    answers = [correct, *(str(record[f"Incorrect Answer {i}"]).strip() for i in (1, 2, 3))]
    key = str(record.get("Record ID", record["Question"]))
    ordered = sorted(answers, key=lambda a: xxhash.xxh3_64_hexdigest(f"{key}\0{a}".encode()))
    return ordered, "ABCD"[ordered.index(correct)]


def _gpqa_prompt(record: dict[str, Any]) -> str:
    options, _ = _gpqa_options(record)
    lines = "\n".join(f"{letter}) {text}" for letter, text in zip("ABCD", options, strict=True))
    return f"{str(record['Question']).strip()}\n\n{lines}\n\n{CHOICE_INSTRUCTION}"


def _gpqa_reference(record: dict[str, Any]) -> dict[str, Any]:
    return {"correct_choice": _gpqa_options(record)[1]}


def _ifeval_reference(record: dict[str, Any]) -> dict[str, Any]:
    kwargs = record["kwargs"]
    return {
        "instruction_id_list": list(record["instruction_id_list"]),
        "kwargs": kwargs if isinstance(kwargs, str) else json.dumps(kwargs),
    }


EVAL_BENCHMARKS: dict[str, EvalBenchmark] = {
    b.name: b
    for b in (
        EvalBenchmark(
            "aime24", "math", "math", _math_prompt("problem"), _answer("expected_answer")
        ),
        EvalBenchmark(
            "aime25", "math", "math", _math_prompt("problem"), _answer("expected_answer")
        ),
        EvalBenchmark("amc", "math", "math", _math_prompt("problem"), _answer("answer")),
        EvalBenchmark("math500", "math", "math", _math_prompt("problem"), _answer("answer")),
        EvalBenchmark("minerva", "math", "math", _math_prompt("problem"), _answer("answer")),
        EvalBenchmark("olympiadbench", "math", "math", _math_prompt("problem"), _answer("answer")),
        EvalBenchmark("gsm8k", "math", "math", _math_prompt("question"), _gsm8k_answer),
        EvalBenchmark("code_contests", "code", "code", _stdio_prompt, _tests),
        EvalBenchmark("codeforces", "code", "code", _stdio_prompt, _tests),
        EvalBenchmark("leetcode", "code", "code", lambda r: str(r["problem"]), _tests),
        EvalBenchmark("humaneval", "code", "code", _humaneval_prompt, _humaneval_tests),
        EvalBenchmark("ifeval", "if", "if", lambda r: str(r["prompt"]), _ifeval_reference),
        EvalBenchmark("ifbench", "if", "if", lambda r: str(r["prompt"]), _ifeval_reference),
        EvalBenchmark("gpqa_diamond", "choice", "choice", _gpqa_prompt, _gpqa_reference),
    )
}


@dataclass
class EvalItems:
    """A benchmark's items as `evaluate` uses them: `frame` has `item_id`, `prompt` and the
    reference columns; `content_hash` and `origin` say exactly which items these are."""

    benchmark: EvalBenchmark
    frame: pl.DataFrame
    content_hash: str
    origin: str

    @property
    def name(self) -> str:
        return self.benchmark.name


def eval_benchmark(name: str) -> EvalBenchmark:
    """The evaluation entry of a benchmark name or alias; ValueError lists what is known."""
    try:
        spec = resolve_name(name)
    except ValueError:
        spec = None
    if spec is None or spec.name not in EVAL_BENCHMARKS:
        raise ValueError(
            f"no evaluation for benchmark {name!r}; known: {', '.join(sorted(EVAL_BENCHMARKS))}"
        )
    return EVAL_BENCHMARKS[spec.name]


def load_items(name: str, local_dir: str | Path | None = None, allow_hub: bool = True) -> EvalItems:
    """Read a benchmark's items: a registered name (the local copy in `local_dir` or
    $CASCADE_BENCHMARK_DIR, else the Hub) or a `.jsonl` file of one's own (`file_items`;
    a lake table is `table_items`).
    Errors name the file and line, or the Hub row, and what is wrong."""
    if name.endswith(".jsonl"):
        return file_items(Path(name))
    benchmark = eval_benchmark(name)
    spec = resolve_name(benchmark.name)
    local_dir = local_dir or os.environ.get(BENCHMARK_DIR_ENV)
    path = Path(local_dir) / spec.local_file if local_dir and spec.local_file else None
    if path is not None and path.exists():
        records = [(f"{path}:{n}", r) for n, r in json_lines(path)]
        origin = str(path)
    elif allow_hub:
        records, origin = _hub_records(spec)
    else:
        raise FileNotFoundError(
            f"benchmark {spec.name!r}: no local copy {spec.local_file!r} in {local_dir} "
            "and Hub loading is off"
        )
    ids, texts, prompts, references = [], [], [], []
    hub = origin.startswith("hf://")
    for index, (where, record) in enumerate(records):
        try:
            ids.append(_item_id(spec, record, index, hub))
            texts.append(_text(spec, record, hub))
            prompts.append(benchmark.prompt(record))
            references.append(benchmark.reference(record))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{where}: cannot read this {spec.name} item ({exc!r})") from None
    if not ids:
        raise ValueError(f"{origin}: benchmark {spec.name!r} has no items")
    frame = pl.DataFrame({"item_id": ids, "prompt": prompts}).hstack(
        pl.DataFrame(references, infer_schema_length=None)
    )
    return EvalItems(benchmark, frame, content_hash(_unique(ids, origin), texts), origin)


FILE_KINDS = (
    ("correct_choice", "choice"),
    ("answer", "math"),
    ("tests", "code"),
    ("instruction_id_list", "if"),
)
"""A benchmark file's verifier, by the reference field its first item has."""


def file_items(path: Path) -> EvalItems:
    """A benchmark of one's own in a jsonl file (see `record_items`), named by its stem."""
    if not path.is_file():
        raise FileNotFoundError(f"benchmark file {path} does not exist")
    records = [(f"{path}:{n}", r) for n, r in json_lines(path)]
    return record_items(path.stem, records, str(path))


def table_items(lake: Lake, ref: str) -> EvalItems:
    """A lake table as a benchmark (a recipe's held-out set, `lake:math_rl_v2_heldout`),
    named by the table; see `record_items`."""
    info = lake.resolve(ref)
    rows = lake.read(info.ref).to_pylist()
    return record_items(
        info.name, [(f"{info.ref} row {i}", r) for i, r in enumerate(rows)], info.ref
    )


def record_items(name: str, records: list[tuple[str, dict[str, Any]]], origin: str) -> EvalItems:
    """Items of one's own (held-out sets, a toy world's): `problem` (or `prompt`), sent as
    written, and the reference of one verifier kind (`answer` math, `tests` code,
    `instruction_id_list` + `kwargs` if); ids from `uid` or `id` when given."""
    if not records:
        raise ValueError(f"{origin}: benchmark {name!r} has no items")
    where, first = records[0]
    kinds = [kind for field, kind in FILE_KINDS if first.get(field) is not None]
    text = "problem" if first.get("problem") is not None else "prompt"
    if not kinds or first.get(text) is None:
        raise ValueError(
            f"{where}: a benchmark item needs `problem` (or `prompt`) and one of "
            f"{', '.join(f for f, _ in FILE_KINDS)}; it has {sorted(first)}"
        )
    reference = {
        "math": _answer("answer"),
        "code": _tests,
        "if": _ifeval_reference,
        "choice": lambda r: {"correct_choice": str(r["correct_choice"]).strip()},
    }[kinds[0]]
    benchmark = EvalBenchmark(name, kinds[0], kinds[0], lambda r: str(r[text]), reference)
    ids, texts, references = [], [], []
    for where, record in records:
        try:
            ids.append(str(record.get("uid") or record.get("id") or f"{name}-{len(ids)}"))
            texts.append(str(record[text]))
            references.append(reference(record))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{where}: cannot read this item ({exc!r})") from None
    frame = pl.DataFrame({"item_id": ids, "prompt": texts}).hstack(
        pl.DataFrame(references, infer_schema_length=None)
    )
    return EvalItems(benchmark, frame, content_hash(_unique(ids, origin), texts), origin)


def _unique(ids: list[str], origin: str) -> list[str]:
    """The ids, when no two items share one (samples are keyed by item)."""
    repeated = sorted(i for i, n in Counter(ids).items() if n > 1)
    if repeated:
        shown = ", ".join(repeated[:5])
        raise ValueError(f"{origin}: item ids repeat ({shown}); ids must be unique")
    return ids


def _hub_records(spec: BenchmarkSpec) -> tuple[list[tuple[str, dict[str, Any]]], str]:
    ds = hub_dataset(spec)
    origin = f"hf://{spec.hub_id}:{spec.hub_split}"
    return [(f"{origin} row {i}", dict(r)) for i, r in enumerate(ds)], origin


def _item_id(spec: BenchmarkSpec, record: dict[str, Any], index: int, hub: bool) -> str:
    """The item's id exactly as decontamination names it (so hashes agree)."""
    field = spec.hub_id_field if hub else spec.id_field
    if field is not None and record.get(field) is not None:
        return str(record[field])
    if field is not None and not hub:
        raise ValueError(f"missing id field {field!r}")
    return f"{spec.name}-{index}"


def _text(spec: BenchmarkSpec, record: dict[str, Any], hub: bool) -> str:
    fields = spec.hub_text_fields if hub else spec.text_fields
    return "\n\n".join(str(record[f]) for f in fields)
