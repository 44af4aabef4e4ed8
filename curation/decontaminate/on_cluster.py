"""Decontamination on a Ray cluster: the plan `RayExecutor` runs for `decontaminate`
(registered in `curation.cluster_plans`), giving the operator's result.

The benchmark n-gram index is built once on the driver and shared through the object store
(each worker fetches it once); the scan is a batch map over blocks, by chunks as
`scan_and_measure` does; for the boilerplate-aware rule the stock n-grams come from document
frequencies over every row (a shuffle of (n-gram, text) pairs on the n-gram), then the
per-row measurement is a second batch map; `decontamination_result` assembles kept and
dropped rows as the operator does. Ray is imported only by the executor, when the plan runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from curation.decontaminate.index import BenchmarkIndex
from curation.decontaminate.rules import ContaminationRule, measure_rows, rule_named, stock_grams
from curation.decontaminate.scan import decontaminate, decontamination_result, scan_chunk
from curation.sorted_sets import sorted_unique
from lake.cluster import RayExecutor
from lake.cluster.blocks import BlockResult, Blocks, as_frame, block_outputs
from lake.cluster.executor import operator_params, worker_object
from lake.steps import Step


def decontaminate_on_cluster(ex: RayExecutor, step: Step, table: Blocks) -> BlockResult:
    """`decontaminate` with the index shared through the object store, the scan mapped over
    blocks, the stock n-grams counted over every row (a shuffle on the n-gram), and each
    block's result assembled where the block is."""
    params = operator_params(decontaminate, step.params)
    n = params["n"]
    benchmarks = params["benchmarks"]
    with ex.stage(step.name, "index"):
        # An index is known by what it was built from (the benchmarks' hashes and n).
        if isinstance(benchmarks, BenchmarkIndex):
            key = ("index", tuple(b.content_hash for b in benchmarks.benchmarks), benchmarks.n)
            index = ex.memo(key, lambda: benchmarks)
        else:
            key = ("index", tuple(b.content_hash for b in benchmarks), n)
            index = ex.memo(key, lambda: BenchmarkIndex.build(benchmarks, n))
        index_ref = ex.shared(key, lambda: index)
    # The operator checks the input and the parameters (on no rows it scans nothing).
    empty = decontaminate(table.empty(), **{**step.params, "benchmarks": index})
    if table.height == 0:
        return ex.put_result(empty)
    rule = params["rule"]
    if isinstance(rule, str):
        rule = rule_named(
            rule,
            min_hits=params["min_hits"],
            min_coverage=params["min_coverage"],
            min_df=params["min_df"],
        )
    stock = params["stock"]
    text_column = params["text_column"]
    p = ex.num_partitions
    starts = table.starts
    blocks = [(int(starts[b]), ref) for b, ref in enumerate(table.refs)]
    with ex.stage(step.name, "scan"):
        scanned = [
            ex.call(
                _decontam_scan,
                1 + p,
                [index_ref],
                ref,
                start,
                text_column,
                rule,
                p,
                params["chunk_rows"],
            )
            for start, ref in blocks
        ]
    if rule.ignore_stock:
        with ex.stage(step.name, "stock n-grams (shuffle on the n-gram)"):
            stock_parts = ex.get(
                [
                    ex.call(
                        _decontam_stock, 1, [index_ref], rule, stock, *[s[1 + q] for s in scanned]
                    )[0]
                    for q in range(p)
                ]
            )
            stock_ids = ex.put(pl.Series("gram", sorted_unique(np.concatenate(stock_parts))))
        with ex.stage(step.name, "measure"):
            measured = [
                ex.remote(_decontam_measure).remote([index_ref], rule, stock_ids, s[0])
                for s in scanned
            ]
    else:
        measured = [s[0] for s in scanned]
    with ex.stage(step.name, "assemble"):
        outs = [
            ex.call(_decontam_assemble, 3, [index_ref], rule, ref, start, measured[b])
            for b, (start, ref) in enumerate(blocks)
        ]
        result = ex.collect(outs, stats={})
    # The counted stats add up over blocks; the others are the operator's own.
    metas = ex.get([o[2] for o in outs])
    by_benchmark: dict[str, int] = {}
    for meta in metas:
        for name, count in meta.stats["dropped_by_benchmark"].items():
            by_benchmark[name] = by_benchmark.get(name, 0) + count
    result.stats = {
        **empty.stats,
        "rows_in": table.height,
        "rows_out": result.kept.height,
        "dropped": result.dropped.height,
        "overlapping_rows": sum(m.stats["overlapping_rows"] for m in metas),
        "dropped_by_benchmark": dict(sorted(by_benchmark.items())),
    }
    return result


def _decontam_scan(
    index_holder: list[Any],
    block: Any,
    start: int,
    text_column: str,
    rule: ContaminationRule,
    parts: int,
    chunk_rows: int,
) -> Any:
    """A block's verified benchmark n-gram overlaps (rows numbered in the whole table) and,
    for the stock rule, its (n-gram, text) pairs cut by n-gram; the literal rule measures
    here. By chunks of `chunk_rows`, as `scan_and_measure` does (small NumPy buffers)."""
    index = worker_object(index_holder)
    texts = as_frame(block).get_column(text_column)
    scanned = [
        scan_chunk(texts.slice(lo, chunk_rows), index, rule, offset=start + lo)
        for lo in range(0, max(texts.len(), 1), chunk_rows)
    ]
    found = pl.concat([f for f, _ in scanned], how="vertical")
    if not rule.ignore_stock:
        return (found, *[None] * parts)  # measured already
    documents = pl.concat([d for _, d in scanned if d is not None], how="vertical")
    gram = documents["gram"].to_numpy()
    cut = [documents.filter(pl.Series(gram % parts == q)) for q in range(parts)]
    return (found, *cut)


def _decontam_stock(
    index_holder: list[Any], rule: ContaminationRule, stock: Any, *documents: pl.DataFrame
) -> np.ndarray:
    """Stock n-gram ids among one n-gram partition (document frequencies over every row;
    n-grams stock by benchmarks alone come out of every partition, the union is the same)."""
    index = worker_object(index_holder)
    docs = pl.concat(documents, how="vertical")
    return stock_grams(docs, index, rule, stock).to_numpy()


def _decontam_measure(
    index_holder: list[Any], rule: ContaminationRule, stock_ids: pl.Series, found: pl.DataFrame
) -> pl.DataFrame:
    return measure_rows(found, worker_object(index_holder), rule, stock_ids)


def _decontam_assemble(
    index_holder: list[Any], rule: ContaminationRule, block: Any, start: int, measured: Any
) -> tuple:
    """One block's result from its rows' measurements (rows numbered in the whole table)."""
    found = as_frame(measured)
    found = found.with_columns((pl.col("row") - start).cast(found.schema["row"]))
    result = decontamination_result(as_frame(block), found, rule, worker_object(index_holder))
    return block_outputs(result)
