"""SWE instances: read SWE-bench-style files, drop SWE-bench Verified repositories, dedup.

The recipe's rules for every SWE source (cascade-recipe.md 3.4): drop every instance from a
repository that appears in SWE-bench Verified (not only the evaluated instances: a model
trained on other issues of the same repository has seen its code), and dedup across sources
on (repository, base commit).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import polars as pl
import xxhash

from curation.decontaminate.benchmarks import Benchmark
from curation.swe.repository import patch_files
from lake.files import json_lines
from lake.operators import count_by, counted, decide
from lake.steps import StepResult
from schemas.swe import SWE_INSTANCES

REQUIRED = ("instance_id", "repo", "base_commit", "problem_statement", "patch")
TEST_LISTS = ("FAIL_TO_PASS", "PASS_TO_PASS")
_REPO = re.compile(r"^[\w.-]+/[\w.-]+$")
_COMMIT = re.compile(r"^[0-9a-fA-F]{7,40}$")

# The repositories of SWE-bench Verified's 500 instances (the same 12 as SWE-bench).
SWE_BENCH_VERIFIED_REPOS = (
    "astropy/astropy",
    "django/django",
    "matplotlib/matplotlib",
    "mwaskom/seaborn",
    "pallets/flask",
    "psf/requests",
    "pydata/xarray",
    "pylint-dev/pylint",
    "pytest-dev/pytest",
    "scikit-learn/scikit-learn",
    "sphinx-doc/sphinx",
    "sympy/sympy",
)


@dataclass(frozen=True)
class BadRow:
    """A source line that is not a usable instance: where and why."""

    file: str
    line: int
    error: str


@dataclass
class SweRead:
    """Instances read from files (a `swe_instances` frame) and the lines that were not."""

    frame: pl.DataFrame
    bad_rows: list[BadRow]


def instance_uid(source: str, instance_id: str) -> str:
    """The row key: xxh3-128 of (source, instance id)."""
    return xxhash.xxh3_128_hexdigest(f"{source}\x1f{instance_id}".encode())


def normalize_repo(name: str) -> str:
    """`owner/name` in lower case, from a GitHub URL, a `.git` clone URL or `owner__name`.

    >>> normalize_repo("https://github.com/Django/django.git")
    'django/django'
    >>> normalize_repo("pytest-dev__pytest")
    'pytest-dev/pytest'
    """
    text = name.strip().lower().removesuffix("/").removesuffix(".git")
    text = re.sub(r"^(https?://)?(www\.)?github\.com/", "", text)
    if "/" not in text and "__" in text:
        text = text.replace("__", "/", 1)
    return text


def _test_list(value: Any, field: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except json.JSONDecodeError:
            raise ValueError(f"field {field!r} is text but not a JSON list") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"field {field!r} must be a list of test ids")
    return value


def _instance(record: dict[str, Any], source: str) -> dict[str, Any]:
    """One record as a contract row; ValueError says which field is wrong."""
    for field in REQUIRED:
        value = record.get(field)
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"field {field!r} is missing or not a non-empty string")
    if not _REPO.match(record["repo"].strip()):
        raise ValueError(f"repo {record['repo']!r} is not owner/name")
    if not _COMMIT.match(record["base_commit"].strip()):
        raise ValueError(f"base_commit {record['base_commit']!r} is not a git commit hash")
    if not patch_files(record["patch"]):
        raise ValueError("patch is not a unified diff that changes any file")
    test_patch = record.get("test_patch")
    if test_patch is not None and not isinstance(test_patch, str):
        raise ValueError("field 'test_patch' must be a string or null")
    extra = {k: v for k, v in record.items() if k not in (*REQUIRED, "test_patch", *TEST_LISTS)}
    return {
        "uid": instance_uid(source, record["instance_id"]),
        "source": source,
        "source_id": record["instance_id"],
        "repo": record["repo"].strip(),
        "base_commit": record["base_commit"].strip().lower(),
        "problem_statement": record["problem_statement"],
        "patch": record["patch"],
        "test_patch": test_patch,
        "FAIL_TO_PASS": _test_list(record.get("FAIL_TO_PASS"), "FAIL_TO_PASS"),
        "PASS_TO_PASS": _test_list(record.get("PASS_TO_PASS"), "PASS_TO_PASS"),
        "metadata": json.dumps(extra, default=str, ensure_ascii=False),
    }


def read_swe_instances(
    paths: Sequence[str | Path],
    *,
    source: str | None = None,
    on_error: Literal["raise", "skip"] = "raise",
) -> SweRead:
    """Read SWE-bench-style jsonl files into a `swe_instances` frame.

    `source` names the rows' origin (default: each file's stem). With `on_error="raise"`, the
    first bad line raises ValueError naming file, line and field; with `"skip"` bad lines are
    returned in `bad_rows`. An instance id repeated within one source is a bad line too.
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    rows: list[dict[str, Any]] = []
    bad: list[BadRow] = []
    seen: dict[str, str] = {}
    for path in paths:
        name = source or Path(path).name.removesuffix(".jsonl")
        for line, record in _records(path, bad, on_error):
            try:
                row = _instance(record, name)
                if row["uid"] in seen:
                    raise ValueError(
                        f"instance_id {row['source_id']!r} repeats (first at {seen[row['uid']]})"
                    )
            except ValueError as exc:
                if on_error == "raise":
                    raise ValueError(f"{path}:{line}: {exc}") from None
                bad.append(BadRow(str(path), line, str(exc)))
                continue
            seen[row["uid"]] = f"{path}:{line}"
            rows.append(row)
    frame = pl.DataFrame(
        rows,
        schema={
            **{name: pl.String for name in ("uid", "source", "source_id", "repo", "base_commit")},
            "problem_statement": pl.String,
            "patch": pl.String,
            "test_patch": pl.String,
            "FAIL_TO_PASS": pl.List(pl.String),
            "PASS_TO_PASS": pl.List(pl.String),
            "metadata": pl.String,
        },
    )
    SWE_INSTANCES.validate(frame.to_arrow().schema, "swe_instances")
    return SweRead(frame=frame, bad_rows=bad)


def _records(
    path: str | Path, bad: list[BadRow], on_error: str
) -> Iterable[tuple[int, dict[str, Any]]]:
    """(line, record) of a jsonl file; with on_error="skip" an invalid JSON line is a bad row."""
    if on_error == "raise":
        yield from json_lines(path)
        return
    with open(path, encoding="utf-8") as handle:
        for line, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as exc:
                bad.append(BadRow(str(path), line, f"invalid JSON ({exc.msg})"))
                continue
            if not isinstance(record, dict):
                bad.append(BadRow(str(path), line, "not a JSON object"))
                continue
            yield line, record


def load_repo_list(repos: Sequence[str] | str | Path) -> set[str]:
    """Normalized repository names from a list, or from a file: one name per line (`#`
    comments allowed), or jsonl records with a `repo` field (SWE-bench Verified itself)."""
    if isinstance(repos, str | Path) and Path(repos).is_file():
        path = Path(repos)
        if path.suffix == ".jsonl":
            names = []
            for line, record in json_lines(path):
                if not isinstance(record.get("repo"), str):
                    raise ValueError(f"{path}:{line}: record has no 'repo' string")
                names.append(record["repo"])
        else:
            lines = path.read_text(encoding="utf-8").splitlines()
            names = [t.split("#", 1)[0].strip() for t in lines]
        return {normalize_repo(n) for n in names if n}
    if isinstance(repos, str | Path):
        raise ValueError(f"repository list {repos!r} is not a file; pass a list of names")
    return {normalize_repo(n) for n in repos}


def repo_list_benchmark(repos: Sequence[str] | str | Path) -> Benchmark:
    """A repository list (`load_repo_list`) as a `Benchmark` for a manifest, the normalized
    names as ids and texts: named after its file, or `verified_repos` when given inline."""
    names = sorted(load_repo_list(repos))
    if isinstance(repos, str | Path):
        return Benchmark(Path(repos).stem, names, names, origin=str(repos), domain="swe")
    return Benchmark("verified_repos", names, names, origin="params.verified_repos", domain="swe")


def drop_verified_repos(
    df: pl.DataFrame, *, verified_repos: Sequence[str] | str | Path = SWE_BENCH_VERIFIED_REPOS
) -> StepResult:
    """Drop every instance whose repository is one of SWE-bench Verified's.

    `verified_repos` is a list of names or a file (see `load_repo_list`). Dropped rows carry
    reason `verified_repo` and `repo_key`, the normalized name that matched.
    """
    blocked = load_repo_list(verified_repos)
    if not blocked:
        raise ValueError("the SWE-bench Verified repository list is empty")
    keyed = df.with_columns(
        pl.col("repo").map_elements(normalize_repo, return_dtype=pl.String).alias("repo_key")
    )
    hit = pl.col("repo_key").is_in(pl.Series(sorted(blocked)).implode())
    result = decide(
        keyed,
        pl.when(hit).then(pl.lit("verified_repo")),
        drop_only=("repo_key",),
        stats={"verified_repos": len(blocked)},
    )
    result.stats["dropped_by_repo"] = count_by(result.dropped, "repo_key")
    return result


def dedup_repo_commit(
    df: pl.DataFrame, *, source_priority: Sequence[str] = (), id_column: str = "uid"
) -> StepResult:
    """Across sources, keep one source's instances per (repository, base commit).

    Instances of one source at one commit are different issues and all stay; when several
    sources hold the same (repo, base commit), the source first in `source_priority` (then
    the one seen first) keeps its rows and the others' are dropped with reason
    `duplicate_repo_commit`, `duplicate_of` (the kept source's first row) and `kept_source`.
    """
    rank = {name: i for i, name in enumerate(source_priority)}
    keyed = df.with_row_index("__row").with_columns(
        pl.col("repo").map_elements(normalize_repo, return_dtype=pl.String).alias("__repo"),
        pl.col("base_commit").str.to_lowercase().alias("__commit"),
        pl.col("source")
        .replace_strict(rank, default=len(rank), return_dtype=pl.Int64)
        .alias("__rank"),
    )
    winners = (
        keyed.sort("__rank", "__row")
        .group_by("__repo", "__commit", maintain_order=True)
        .agg(
            pl.col("source").first().alias("kept_source"),
            pl.col(id_column).first().cast(pl.String).alias("duplicate_of"),
        )
    )
    joined = keyed.join(winners, on=["__repo", "__commit"], how="left").sort("__row")
    lose = pl.col("source") != pl.col("kept_source")
    helpers = ["__row", "__repo", "__commit", "__rank"]
    kept = joined.filter(~lose).drop(*helpers, "kept_source", "duplicate_of")
    dropped = (
        joined.filter(lose)
        .drop(*helpers)
        .with_columns(pl.lit("duplicate_repo_commit").alias("reason"))
    )
    return counted(df.height, kept, dropped, {"repo_commits": winners.height})


def instances_from_prompts(df: pl.DataFrame, *, problem_column: str = "problem") -> StepResult:
    """Recipe step: prompt rows ingested from SWE-bench-style files -> `swe_instances` rows.

    The build runner ingests sources as prompts (the issue text as `problem`, the instance
    id as `source_id` when mapped so, every other field in the `metadata` JSON); this step
    reads the instance fields back and checks them as `read_swe_instances` does. Rows keep
    their `uid` (`<file>:<line>`), so a row that is not a usable instance is dropped with
    reason `malformed_instance` and an `error` that, with its uid, names the file, line and
    field.
    """
    shaped: list[dict[str, Any] | None] = []
    errors: list[str | None] = []
    rows = df.select(problem_column, "source", "source_id", "metadata").iter_rows()
    for problem, source, source_id, raw in rows:
        try:
            meta = json.loads(raw) if raw else {}
            if not isinstance(meta, dict):
                raise ValueError("metadata is not a JSON object")
            record = {"instance_id": source_id, **meta, "problem_statement": problem}
            shaped.append(_instance(record, source))
            errors.append(None)
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            shaped.append(None)
            errors.append(str(exc))

    def column(name: str, dtype: pl.DataType) -> pl.Series:
        return pl.Series(name, [r[name] if r else None for r in shaped], dtype=dtype)

    good = pl.Series([r is not None for r in shaped], dtype=pl.Boolean)
    measured = df.with_columns(
        pl.col(problem_column).alias("problem_statement"),
        pl.when(good).then(column("source_id", pl.String)).otherwise(pl.col("source_id")),
        pl.when(good).then(column("metadata", pl.String)).otherwise(pl.col("metadata")),
        *[column(name, pl.String) for name in ("repo", "base_commit", "patch", "test_patch")],
        *[column(name, pl.List(pl.String)) for name in TEST_LISTS],
        pl.Series("error", errors, dtype=pl.String),
    )
    bad = pl.col("error").is_not_null()
    result = decide(
        measured,
        pl.when(bad).then(pl.lit("malformed_instance")),
        drop_only=("error",),
        counts=("rows_in",),
    )
    result.stats["malformed"] = result.dropped.height
    return result
