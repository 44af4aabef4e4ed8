"""Difficulty: measured pass rates per (prompt, model, sampling), and the filters built on them.

Measure first, decide second. `measure_pass_rates` samples a model k times per prompt
(generations cached in the lake), scores every response against the prompt's own reference
(never against a generated field), and keeps one row per (prompt, model, sampling, verifier)
in the lake's `difficulty` table, so a measurement is never paid for twice and
`SELECT ... FROM difficulty` answers how hard a set is for a model. The prompts carry the
measurement as columns (`<label>_pass_rate`, `<label>_correct`, `<label>_k`, token lengths,
truncated share); `difficulty_filter`, `easy_by_length` decide on those columns, so
thresholds can be re-tuned with SQL without sampling again.

Also here: `majority_answer_check` (a teacher's majority answer must match a noisy source's
reference), `response_filters` (which teacher responses an SFT set keeps), and
`disjoint_from` (RL prompts must not be, exactly or nearly, prompts of the SFT sets).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import polars as pl
import xxhash

from curation.dedup import exact_dedup, near_dedup
from curation.generate.backend import Backend
from curation.generate.samples import Sampler, generations_for
from curation.verify.rewards import verifier_named
from curation.verify.table import verify_frame
from lake.catalog import Lake
from lake.operators import count_by, decide
from lake.progress import phase
from lake.steps import StepResult

DIFFICULTY_TABLE = "difficulty"
MEASURES = (
    "k",
    "correct",
    "undecided",
    "pass_rate",
    "mean_tokens",
    "max_tokens",
    "truncated_share",
)
_KEY = ("prompt_id", "model", "sampler_key", "verifier", "reference_hash", "tokenizer")


def measure_pass_rates(
    df: pl.DataFrame,
    *,
    lake: Lake,
    label: str,
    sampler: Sampler,
    verifier: str = "math",
    reference_field: str | None = None,
    tokenizer: str | None = None,
    generations_table: str = "generations",
    prompt_column: str = "problem",
    backend_factory: Callable[[str], Backend] | None = None,
) -> StepResult:
    """Add `<label>_<measure>` columns: the pass rate of `sampler` on each prompt.

    Measurements already in the `difficulty` table for the same prompt, model, sampling,
    verifier, reference and tokenizer are reused; only the other prompts are sampled and
    scored. Token lengths are counted in `tokenizer` (a path or hub id; the target model's)
    when given, else as the model reported them. Nothing is dropped.
    """
    reference_field = reference_field or verifier_named(verifier).columns[0]
    frame = df.with_columns(
        _reference_hashes(df, reference_field).alias("_reference_hash"),
        pl.col("id").cast(pl.String).alias("_prompt_id"),
    )
    key = {
        "model": sampler.model,
        "sampler_key": sampler.key(),
        "verifier": verifier,
        "tokenizer": tokenizer or "",
    }
    known = _known_measurements(lake, key)
    wanted = frame.select("_prompt_id", "_reference_hash").unique()
    missing = wanted.join(
        known.select(
            pl.col("prompt_id").alias("_prompt_id"),
            pl.col("reference_hash").alias("_reference_hash"),
        ),
        on=["_prompt_id", "_reference_hash"],
        how="anti",
    )
    counts = {"planned": 0, "cached": 0, "generated": 0}
    if missing.height:
        known_prompts = wanted.height - missing.height
        note = f"{missing.height:,} prompts x {sampler.k} samples; {known_prompts:,} known"
        with phase(f"pass rates {label} ({sampler.model})", note=note):
            todo = frame.join(missing, on=["_prompt_id", "_reference_hash"], how="semi").unique(
                ["_prompt_id", "_reference_hash"], keep="first", maintain_order=True
            )
            samples, counts = generations_for(
                todo,
                sampler,
                lake=lake,
                table=generations_table,
                prompt_column=prompt_column,
                id_column="id",
                backend_factory=backend_factory,
            )
            measured = _score(samples, todo, verifier, reference_field, tokenizer).with_columns(
                **{k: pl.lit(v) for k, v in key.items()}, mode=pl.lit(sampler.mode)
            )
            lake.commit(
                DIFFICULTY_TABLE,
                measured.select(*_KEY, "mode", *MEASURES),
                kind="difficulty",
                mode="append",
                producer="measure_pass_rates",
                params={**key, "sampler": sampler.model, "k": sampler.k},
            )
        known = pl.concat([known, measured.select(known.columns)], how="vertical_relaxed")
    columns = known.select(
        pl.col("prompt_id").alias("_prompt_id"),
        pl.col("reference_hash").alias("_reference_hash"),
        *[pl.col(m).alias(f"{label}_{m}") for m in MEASURES],
    ).unique(["_prompt_id", "_reference_hash"], keep="last")
    kept = frame.join(columns, on=["_prompt_id", "_reference_hash"], how="left").drop(
        "_prompt_id", "_reference_hash"
    )
    stats = {
        "model": sampler.model,
        "label": label,
        "prompts_measured": missing.height,
        "prompts_reused": wanted.height - missing.height,
        **counts,
        "mean_pass_rate": kept.get_column(f"{label}_pass_rate").mean(),
    }
    return StepResult(kept=kept, dropped=kept.clear().with_columns(reason=pl.lit("")), stats=stats)


def _reference_hashes(df: pl.DataFrame, reference_field: str) -> pl.Series:
    """A hash of each row's reference (a column, or a key of the metadata JSON)."""
    if reference_field in df.columns:
        values = df.get_column(reference_field).to_list()
    elif "metadata" in df.columns:
        values = [
            json.dumps(json.loads(m or "{}").get(reference_field), sort_keys=True)
            for m in df.get_column("metadata").to_list()
        ]
    else:
        values = [None] * df.height
    return pl.Series(
        [xxhash.xxh3_64_hexdigest(json.dumps(v).encode()) for v in values], dtype=pl.String
    )


def _known_measurements(lake: Lake, key: dict[str, str]) -> pl.DataFrame:
    schema = {**{k: pl.String for k in _KEY}, "mode": pl.String, **_MEASURE_TYPES}
    if not lake.has(DIFFICULTY_TABLE):
        return pl.DataFrame(schema=schema)
    scan = lake.scan(DIFFICULTY_TABLE)
    for name, value in key.items():
        scan = scan.filter(pl.col(name) == value)
    return scan.select(list(schema)).collect().cast(schema)  # type: ignore[arg-type]


_MEASURE_TYPES = {
    "k": pl.Int64,
    "correct": pl.Int64,
    "undecided": pl.Int64,
    "pass_rate": pl.Float64,
    "mean_tokens": pl.Float64,
    "max_tokens": pl.Int64,
    "truncated_share": pl.Float64,
}


def _score(
    samples: pl.DataFrame,
    prompts: pl.DataFrame,
    verifier: str,
    reference_field: str,
    tokenizer: str | None,
) -> pl.DataFrame:
    """Per prompt: k, correct, undecided, pass rate, token lengths and truncated share."""
    references = [c for c in (reference_field, "metadata") if c in prompts.columns]
    joined = samples.join(
        prompts.select(pl.col("_prompt_id").alias("prompt_id"), "_reference_hash", *references),
        on="prompt_id",
        how="inner",
    )
    scored = verify_frame(joined, verifier, reference_field=reference_field)
    tokens = (
        pl.Series(_count_tokens(tokenizer, scored.get_column("response").to_list()))
        if tokenizer
        else scored.get_column("completion_tokens")
    )
    scored = scored.with_columns(tokens.cast(pl.Int64).alias("_tokens"))
    return (
        scored.group_by("prompt_id", "_reference_hash", maintain_order=True)
        .agg(
            pl.len().cast(pl.Int64).alias("k"),
            pl.col("passed").fill_null(False).sum().cast(pl.Int64).alias("correct"),
            pl.col("passed").null_count().cast(pl.Int64).alias("undecided"),
            (pl.col("passed").fill_null(False).sum() / pl.len()).alias("pass_rate"),
            pl.col("_tokens").mean().alias("mean_tokens"),
            pl.col("_tokens").max().cast(pl.Int64).alias("max_tokens"),
            pl.col("truncated").mean().alias("truncated_share"),
        )
        .rename({"_reference_hash": "reference_hash"})
    )


def _count_tokens(tokenizer: str, texts: list[str]) -> list[int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer)
    return [len(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"]]


def difficulty_filter(
    df: pl.DataFrame,
    *,
    easy_label: str | None = None,
    easy_at_least: float | None = None,
    hard_label: str | None = None,
    hard_at_most: float | None = None,
) -> StepResult:
    """Drop `too_easy` prompts (the `easy_label` model's pass rate >= `easy_at_least`) and
    `too_hard` ones (the `hard_label` model's pass rate <= `hard_at_most`).

    The recipe's numbers: Math RL drops what a 7B weak model solves in >= 75% of 16 samples;
    Code RL drops 8/8 by the weak model (easy_at_least=1.0) and 0/8 by the strong teacher
    (hard_at_most=0.0). The drop detail has the counts behind the decision.
    """
    rules = []
    if easy_label is not None and easy_at_least is not None:
        rules.append(("too_easy", easy_label, pl.col(f"{easy_label}_pass_rate") >= easy_at_least))
    if hard_label is not None and hard_at_most is not None:
        rules.append(("too_hard", hard_label, pl.col(f"{hard_label}_pass_rate") <= hard_at_most))
    if not rules:
        raise ValueError("difficulty_filter needs an easy or a hard threshold")
    for _, label, _ in rules:
        if f"{label}_pass_rate" not in df.columns:
            raise ValueError(
                f"no pass rates for {label!r}: measure them first (measure_pass_rates)"
            )
    reason = pl.lit(None, pl.String)
    for name, _, condition in reversed(rules):
        reason = pl.when(condition.fill_null(False)).then(pl.lit(name)).otherwise(reason)
    marked = df.with_columns(reason.alias("reason"))
    details = []
    for name, label, _ in rules:
        details.append(
            pl.when(pl.col("reason") == name).then(
                pl.format(
                    "{} solved {}/{}",
                    pl.lit(label),
                    pl.col(f"{label}_correct"),
                    pl.col(f"{label}_k"),
                )
            )
        )
    detail = {"difficulty_evidence": pl.coalesce(details)}
    # The deciding model's counts, as their own detail fields (the label's columns are input
    # columns, which the drop detail leaves out).
    for measure in ("correct", "k", "pass_rate"):
        value = None
        for name, label, _ in rules:
            value = (
                pl.when(pl.col("reason") == name).then(pl.col(f"{label}_{measure}"))
                if value is None
                else value.when(pl.col("reason") == name).then(pl.col(f"{label}_{measure}"))
            )
        detail[f"decided_{measure}"] = value
    stats = {name: int((marked["reason"] == name).sum()) for name in ("too_easy", "too_hard")}
    return decide(marked, "reason", detail=detail, stats=stats, counts=())


def easy_by_length(df: pl.DataFrame, *, label: str, min_tokens: int) -> StepResult:
    """Drop prompts whose `label` model answers in fewer than `min_tokens` tokens on average
    (stage-2 math SFT keeps prompts whose teacher answer is >= 2K tokens)."""
    column = f"{label}_mean_tokens"
    if column not in df.columns:
        raise ValueError(f"no {column!r}: measure {label!r} first (measure_pass_rates)")
    short = pl.col(column).fill_null(0) < min_tokens
    return decide(df, pl.when(short).then(pl.lit("easy_by_length")), counts=("dropped",))


def majority_answer_check(
    df: pl.DataFrame,
    *,
    lake: Lake,
    sampler: Sampler,
    generations_table: str = "generations",
    prompt_column: str = "problem",
    backend_factory: Callable[[str], Backend] | None = None,
) -> StepResult:
    """Keep problems whose teacher majority answer (over k samples) matches the reference.

    For noisy sources (NuminaMath in the recipe): `majority_mismatch` drops carry the
    majority answer and its votes; `no_majority` is a tie for the most votes, or no
    extractable answer at all.
    """
    from curation.verify.math import answer_vote_key, extract_boxed, majority_vote_frame

    samples, counts = generations_for(
        df,
        sampler,
        lake=lake,
        table=generations_table,
        prompt_column=prompt_column,
        id_column="id",
        backend_factory=backend_factory,
    )
    references = df.select(pl.col("id").cast(pl.String).alias("prompt_id"), "answer").unique(
        "prompt_id", keep="first"
    )
    votes = majority_vote_frame(
        samples.join(references, on="prompt_id"), group_field="prompt_id", reference_field="answer"
    )
    # A tie for first place is no majority (majority_vote_frame gives ties to the first seen).
    keys = samples.select(
        "prompt_id",
        pl.col("response")
        .map_elements(
            lambda r: _vote_key(r, extract_boxed, answer_vote_key), return_dtype=pl.String
        )
        .alias("_key"),
    ).drop_nulls("_key")
    tally = keys.group_by("prompt_id", "_key").len().sort("len", descending=True)
    tied = (
        tally.group_by("prompt_id")
        .agg(pl.col("len").head(2).alias("_top"))
        .filter(
            (pl.col("_top").list.len() == 2)
            & (pl.col("_top").list.first() == pl.col("_top").list.last())
        )
        .select("prompt_id", pl.lit(True).alias("_tie"))
    )
    votes = votes.join(tied, on="prompt_id", how="left").with_columns(
        pl.when(pl.col("_tie").fill_null(False))
        .then(None)
        .otherwise(pl.col("agrees"))
        .alias("agrees")
    )
    marked = df.join(
        votes.select(
            "prompt_id", "majority_answer", "votes", pl.col("k").alias("majority_k"), "agrees"
        ),
        left_on=pl.col("id").cast(pl.String),
        right_on="prompt_id",
        how="left",
    ).drop("prompt_id", strict=False)
    reason = (
        pl.when(pl.col("agrees").is_null())
        .then(pl.lit("no_majority"))
        .when(~pl.col("agrees"))
        .then(pl.lit("majority_mismatch"))
    )
    result = decide(marked, reason, stats=counts, counts=())
    result.stats["dropped"] = result.dropped.height
    return result


def _vote_key(response: str, extract, key) -> str | None:
    answer = extract(response or "")
    return None if answer is None else key(answer)


def response_filters(
    df: pl.DataFrame,
    *,
    max_tokens: int | None = None,
    drop_truncated: bool = True,
    verifier: str | None = "math",
    reference_field: str | None = None,
    longest_without_reference: int | None = None,
) -> StepResult:
    """Which teacher responses an SFT set keeps (one row per response).

    Drops, in this order: `truncated` responses (cut at the length cap or with an unclosed
    `<think>`), responses over the stage's `max_tokens` (`too_long`), responses whose answer
    disagrees with a ground truth (`verify_failed`; rows without a reference are not judged),
    and, for prompts without a reference, all but the `longest_without_reference` longest
    traces (`shorter_trace`; longer is taken as more thorough).
    """
    reasons: list[tuple[str, pl.Expr]] = []
    frame = df
    if drop_truncated:
        reasons.append(("truncated", pl.col("truncated").fill_null(False)))
    if max_tokens is not None:
        reasons.append(("too_long", pl.col("completion_tokens") > max_tokens))
    if verifier is not None:
        field = reference_field or verifier_named(verifier).columns[0]
        has_reference = _has_reference(frame, field)
        judged = verify_frame(frame.filter(has_reference), verifier, reference_field=field)
        verdicts = frame.select("uid").join(
            judged.select(
                "uid", pl.col("passed").alias("_passed"), pl.col("detail").alias("verdict")
            ),
            on="uid",
            how="left",
        )
        frame = frame.with_columns(verdicts["_passed"], verdicts["verdict"])
        reasons.append(("verify_failed", pl.col("_passed").is_not_null() & ~pl.col("_passed")))
    reason = pl.lit(None, pl.String)
    for name, condition in reversed(reasons):
        reason = pl.when(condition.fill_null(False)).then(pl.lit(name)).otherwise(reason)
    frame = frame.with_columns(reason.alias("reason"))
    if longest_without_reference is not None and verifier is not None:
        rank = (
            pl.col("completion_tokens")
            .rank("ordinal", descending=True)
            .over(pl.col("prompt_uid"), pl.col("reason").is_null())
        )
        shorter = (
            pl.col("reason").is_null()
            & pl.col("_passed").is_null()
            & (rank > longest_without_reference)
        )
        frame = frame.with_columns(
            pl.when(shorter)
            .then(pl.lit("shorter_trace"))
            .otherwise(pl.col("reason"))
            .alias("reason")
        )
    result = decide(frame.drop("_passed", strict=False), "reason", counts=())
    result.stats = {"kept": result.kept.height, **count_by(result.dropped, "reason")}
    return result


def _has_reference(df: pl.DataFrame, field: str) -> pl.Series:
    if field in df.columns:
        col = df.get_column(field)
        present = col.is_not_null()
        if col.dtype == pl.String:
            present &= col.str.strip_chars() != ""
        return present
    if "metadata" in df.columns:
        return pl.Series(
            [json.loads(m or "{}").get(field) not in (None, "", [], {}) for m in df["metadata"]]
        )
    return pl.Series([False] * df.height)


def disjoint_from(
    df: pl.DataFrame,
    *,
    lake: Lake,
    datasets: Sequence[str],
    text_column: str = "problem",
    threshold: float = 0.6,
    keep_apart: Sequence[str] = ("numbers",),
    dedup_options: dict[str, Any] | None = None,
) -> StepResult:
    """Drop prompts that are exact or near duplicates of a prompt in any of `datasets` (lake
    refs of SFT sets): the recipe keeps SFT and RL prompt sets strictly disjoint. The drop
    detail names the SFT dataset version and its row (`in_sft_set`)."""
    if not datasets:
        return StepResult(kept=df, dropped=df.clear().with_columns(reason=pl.lit("")))
    references = []
    for ref in datasets:
        info = lake.resolve(ref)
        other = pl.from_arrow(lake.read(info.ref))
        assert isinstance(other, pl.DataFrame)
        column = text_column if text_column in other.columns else "problem"
        if column not in other.columns:
            raise ValueError(f"{info.ref} has no {text_column!r} column to compare prompts by")
        key = "prompt_uid" if "prompt_uid" in other.columns else "uid"
        references.append(
            other.select(
                pl.col(column).alias(text_column),
                pl.concat_str([pl.lit(info.ref + ":"), pl.col(key)]).alias("_key"),
            ).unique(text_column, keep="first")
        )
    sft = pl.concat(references).with_columns(pl.lit(True).alias("_sft"))
    mine = df.select(pl.col(text_column), pl.col("uid").alias("_key")).with_columns(
        pl.lit(False).alias("_sft")
    )
    union = pl.concat([sft, mine])
    exact = exact_dedup(union, text_column=text_column, id_column="_key")
    near = near_dedup(
        exact.kept,
        text_column=text_column,
        id_column="_key",
        threshold=threshold,
        keep_apart=keep_apart,
        **(dedup_options or {}),
    )
    # Each row's exact cluster (its representative) and near cluster.
    exact_of = pl.concat(
        [
            exact.dropped.select("_key", "_sft", pl.col("duplicate_of").alias("_exact")),
            exact.kept.select("_key", "_sft", pl.col("_key").alias("_exact")),
        ]
    )
    near_of = pl.concat(
        [
            near.dropped.select(
                pl.col("_key").alias("_exact"), pl.col("duplicate_of").alias("_near")
            ),
            near.kept.select(pl.col("_key").alias("_exact"), pl.col("_key").alias("_near")),
        ]
    )
    clusters = exact_of.join(near_of, on="_exact")
    sft_rows = clusters.filter("_sft")
    by_exact = sft_rows.group_by("_exact").agg(pl.col("_key").first().alias("_sft_exact"))
    by_near = sft_rows.group_by("_near").agg(pl.col("_key").first().alias("_sft_near"))
    hits = (
        clusters.filter(~pl.col("_sft"))
        .join(by_exact, on="_exact", how="left")
        .join(by_near, on="_near", how="left")
        .filter(pl.col("_sft_near").is_not_null())
        .select(
            pl.col("_key").alias("uid"),
            pl.coalesce("_sft_exact", "_sft_near").alias("sft_row"),
            pl.when(pl.col("_sft_exact").is_not_null())
            .then(pl.lit("exact"))
            .otherwise(pl.lit("near"))
            .alias("sft_match"),
        )
    )
    marked = df.join(hits, on="uid", how="left")
    in_sft = pl.col("sft_row").is_not_null()
    return decide(
        marked,
        pl.when(in_sft).then(pl.lit("in_sft_set")),
        drop_only=("sft_row", "sft_match"),
        detail={"sft_dataset": pl.col("sft_row").str.split(":").list.first()},
        stats={"in_sft_set": marked.filter(in_sft).height},
        counts=(),
    )
