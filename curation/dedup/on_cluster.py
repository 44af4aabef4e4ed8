"""Exact and near dedup on a Ray cluster: the plans `RayExecutor` runs for `exact_dedup` and
`near_dedup` (registered in `curation.cluster_plans`), giving the operators' results.

- `exact_dedup`: normalization and hashing as a batch map, groups of equal keys by a shuffle
  on the key, one representative per group in the reducers.
- `near_dedup`: signatures and band keys as a batch map (`sketch_rows`, `band_keys`);
  candidate pairs by a shuffle on (band, key) (`star_edges` per bucket, as the operator
  forms them); pairs verified by two exchanges that bring each endpoint's signature;
  components by min-label propagation over the verified edges; rows without an answer
  attached to a single answered cluster by lookups; representatives per cluster
  (`representatives`) by a shuffle on the cluster label; the similarity to the
  representative by the same two exchanges.

The plans call the operators' own helpers, so the two executors compute the same thing
(tests/test_ray_executor.py compares every kept and dropped row and the output hash). Ray is
imported only by the executor, when a plan runs; each task here is a plain function of
NumPy columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl
import xxhash

from curation.dedup.clusters import check_input, reference_mask, representatives
from curation.dedup.exact import exact_dedup, group_keys
from curation.dedup.near import (
    MASK32,
    band_keys,
    near_dedup,
    pack_ordered,
    pack_pairs,
    sketch_rows,
    star_edges,
)
from curation.dedup.normalize import mix64, shingle_text
from curation.sorted_sets import sorted_unique
from lake.cluster import RayExecutor
from lake.cluster.blocks import BlockResult, Blocks, as_frame, block_outputs
from lake.cluster.components import connected_components
from lake.cluster.executor import operator_params
from lake.cluster.partitions import (
    Columns,
    as_returns,
    concat_columns,
    cut_frame,
    split_by_block,
    split_columns,
)
from lake.cluster.shuffle import lookup
from lake.steps import Step, StepResult

# -- exact dedup -----------------------------------------------------------------------------


def exact_dedup_on_cluster(ex: RayExecutor, step: Step, table: Blocks) -> BlockResult:
    """`exact_dedup` with the normalization mapped over blocks, the groups found by a
    shuffle on the normalized text's hash, the representatives' ids fetched from their
    blocks, and each block's kept and dropped rows assembled where the block is."""
    params = operator_params(exact_dedup, step.params)
    text_column, id_column = params["text_column"], params["id_column"]
    reference_columns = list(params["reference_columns"])
    check_input(table.empty(), text_column, id_column)
    if table.height == 0:
        return ex.put_result(exact_dedup(table.empty(), **step.params))
    p, nb, starts = ex.num_partitions, len(table.refs), table.starts
    with ex.stage(step.name, "normalize and hash"):
        mapped = [
            ex.call(
                _exact_keys, p, ref, int(starts[b]), text_column, id_column, reference_columns, p
            )
            for b, ref in enumerate(table.refs)
        ]
    with ex.stage(step.name, "group by normalized text"):
        groups = [ex.call(_exact_groups, 1 + nb, starts, *[m[q] for m in mapped]) for q in range(p)]
        clusters = sum(ex.get([g[0] for g in groups]))
    with ex.stage(step.name, "assemble"):
        named = [
            ex.call(
                _with_rep_ids,
                nb,
                ref,
                int(starts[b]),
                id_column,
                starts,
                *[g[1 + b] for g in groups],
            )
            for b, ref in enumerate(table.refs)
        ]
        outs = [
            ex.call(_exact_assemble, 3, ref, int(starts[b]), *[n[b] for n in named])
            for b, ref in enumerate(table.refs)
        ]
        result = ex.collect(outs, stats={})
    result.stats = {
        "rows_in": table.height,
        "rows_out": result.kept.height,
        "dropped": result.dropped.height,
        "clusters_with_duplicates": int(clusters),
    }
    return result


def _exact_keys(
    block: Any,
    start: int,
    text_column: str,
    id_column: str,
    reference_columns: list[str],
    parts: int,
) -> Any:
    """Per row: the normalized text's hash (the group key `exact_dedup` uses), whether it has
    a reference, and `exact_key` (xxh3-64 of the normalized text), cut by key."""
    block = as_frame(block)
    nulls = block.get_column(id_column).is_null()
    if nulls.any():  # `check_input`'s message, with the row's number in the whole table
        at = start + int(nulls.arg_max() or 0)
        raise ValueError(f"dedup input column {id_column!r} is null at row {at}")
    norm = shingle_text(block.get_column(text_column))
    key = group_keys(norm)
    columns = {
        "key": key,
        "row": np.arange(start, start + block.height, dtype=np.int64),
        "has_ref": reference_mask(block, reference_columns),
        "exact_key": np.array(
            [xxhash.xxh3_64_intdigest(t.encode()) for t in norm.to_list()], dtype=np.uint64
        ),
    }
    return as_returns(split_columns(columns, (key % np.uint64(parts)).astype(np.int64), parts))


def _exact_groups(starts: np.ndarray, *parts: Columns) -> tuple:
    """Rows of one key partition: how many groups have duplicates, and the
    non-representative rows with their representative, group size and `exact_key`, cut by
    the block of the representative (which knows its id)."""
    cols = concat_columns(parts)
    cols = {k: v[np.argsort(cols["row"], kind="stable")] for k, v in cols.items()}
    _, labels = np.unique(cols["key"], return_inverse=True)
    labels = labels.astype(np.int64)
    rep = representatives(labels, cols["has_ref"])
    sizes = np.bincount(labels)
    dropped = rep != np.arange(rep.size)
    found = {
        "row": cols["row"][dropped],
        "rep": cols["row"][rep[dropped]],
        "size": sizes[labels[dropped]].astype(np.int64),
        "exact_key": cols["exact_key"][dropped],
    }
    return (int((sizes > 1).sum()), *split_by_block(found, found["rep"], starts))


def _with_rep_ids(
    block: Any, start: int, id_column: str, starts: np.ndarray, *parts: Columns
) -> Any:
    """Duplicates whose representative is in this block, with the representative's id (as
    the operator casts it), cut by the block of the duplicate."""
    cols = concat_columns(parts)
    ids = as_frame(block).get_column(id_column).cast(pl.String)
    found = pl.DataFrame({k: v for k, v in cols.items() if k != "rep"}).with_columns(
        ids.gather(cols["rep"] - start).alias("rep_id")
    )
    which = np.searchsorted(starts, cols["row"], side="right") - 1
    return as_returns([f.to_arrow() for f in cut_frame(found, which, starts.size - 1)])


def _exact_assemble(block: Any, start: int, *parts: Any) -> tuple:
    """One block's kept rows and its duplicates (as `split_clusters` marks them, with
    `exact_key`), in the block's order."""
    frame = as_frame(block)
    found = _stacked(parts).sort("row")
    dropped = mark_duplicates(
        frame,
        found["row"].to_numpy() - start,
        found["rep_id"],
        found["size"].to_numpy(),
        reason="exact_duplicate",
        prefix="exact:",
    )
    if dropped.height:
        keys = [format(int(k), "016x") for k in found["exact_key"].to_numpy()]
        dropped = dropped.with_columns(pl.Series("exact_key", keys, pl.String))
    kept = _kept_rows(frame, found["row"].to_numpy() - start)
    return block_outputs(StepResult(kept=kept, dropped=dropped))


def mark_duplicates(
    frame: pl.DataFrame,
    rows: np.ndarray,
    rep_ids: pl.Series,
    sizes: np.ndarray,
    *,
    reason: str,
    prefix: str,
    extra: dict[str, np.ndarray] | None = None,
) -> pl.DataFrame:
    """The dropped rows `split_clusters` makes, for duplicates at `rows` of `frame` whose
    representatives (possibly in other blocks) have ids `rep_ids`."""
    rep_ids = rep_ids.cast(pl.String)
    return frame[rows].with_columns(
        pl.lit(reason).alias("reason"),
        (pl.lit(prefix) + rep_ids).alias("cluster_id"),
        rep_ids.alias("duplicate_of"),
        pl.Series("cluster_size", sizes, dtype=pl.Int64),
        *[pl.Series(k, v) for k, v in (extra or {}).items()],
    )


def _kept_rows(frame: pl.DataFrame, dropped: np.ndarray) -> pl.DataFrame:
    keep = np.ones(frame.height, dtype=np.bool_)
    keep[dropped] = False
    return frame[np.flatnonzero(keep)]


def _stacked(parts: Sequence[Any]) -> pl.DataFrame:
    frames = [as_frame(p) for p in parts]
    full = [f for f in frames if f.height]
    return pl.concat(full, how="vertical") if full else frames[0]


# -- near dedup ------------------------------------------------------------------------------


def near_dedup_on_cluster(ex: RayExecutor, step: Step, table: Blocks) -> BlockResult:
    """`near_dedup` as a distributed plan (see the module docstring); `verify="exact"` (Python
    shingle sets) runs on the driver."""
    params = operator_params(near_dedup, step.params)
    if table.height < 2 or params["verify"] == "exact":
        return ex.on_driver(step, table)
    # The operator checks its parameters and derives the banding; one row costs nothing.
    first = as_frame(ex.get(ex.remote(_head).remote(table.refs[0])))
    probe = near_dedup(first, **step.params).stats
    settings = {
        "text_column": params["text_column"],
        "reference_columns": list(params["reference_columns"]),
        "keep_apart": list(params["keep_apart"]),
        "num_perm": params["num_perm"],
        "ngram": params["ngram"],
        "shingle": params["shingle"],
        "scheme": params["scheme"],
        "seed": params["seed"],
        "bands": probe["bands"],
        "rows": probe["rows_per_band"],
    }
    threshold, verify = params["threshold"], params["verify"]
    use_answer = "answer" in settings["keep_apart"]
    n, p = table.height, ex.num_partitions
    starts = table.starts
    blocks = [(int(starts[b]), ref) for b, ref in enumerate(table.refs)]

    with ex.stage(step.name, "signatures and band keys"):
        mapped = [ex.call(_near_block, 3 + 2 * p, ref, start, settings, p) for start, ref in blocks]
        sigs = [m[0] for m in mapped]
        counts = np.array(ex.get([m[2] for m in mapped])).sum(axis=0)
    links_wanted = use_answer and counts[0] > 0 and counts[1] > 0
    nb = len(blocks)

    with ex.stage(step.name, "candidate pairs (shuffle on band keys)"):
        same = [
            ex.call(_band_buckets, nb, starts, False, *[m[3 + q] for m in mapped]) for q in range(p)
        ]
        links = (
            [
                ex.call(_band_buckets, nb, starts, True, *[m[3 + p + q] for m in mapped])
                for q in range(p)
            ]
            if links_wanted
            else [[_empty_pairs_ref(ex)] * nb for _ in range(p)]
        )
    with ex.stage(step.name, "verify pairs (two signature exchanges)"):
        first_ends = [
            ex.call(
                _pairs_first_end,
                1 + 2 * nb,
                blocks[j][0],
                starts,
                len(same),
                sigs[j],
                mapped[j][1],
                *[s[j] for s in same],
                *[lk[j] for lk in links],
            )
            for j in range(nb)
        ]
        candidates = np.array(ex.get([f[0] for f in first_ends])).sum(axis=0)
        second = [
            ex.call(
                _pairs_second_end,
                3,
                blocks[k][0],
                threshold,
                verify,
                nb,
                sigs[k],
                mapped[k][1],
                *[f[1 + k] for f in first_ends],
                *[f[1 + nb + k] for f in first_ends],
            )
            for k in range(nb)
        ]
        verified_edges = [s[0] for s in second]
        verified_links = [s[1] for s in second]
        verified = np.array(ex.get([s[2] for s in second])).sum(axis=0)
    with ex.stage(step.name, "connected components (min-label propagation)"):
        labels = connected_components(ex, verified_edges, p)
        flags = [ex.call(_endpoint_flags, p, e, p) for e in verified_edges]
        vertices = [
            ex.remote(_vertex_table).remote(labels[q], *[f[q] for f in flags]) for q in range(p)
        ]
    attached = ambiguous = 0
    remaps = [_empty_remap_ref(ex)] * p
    if links_wanted and verified[1]:
        with ex.stage(step.name, "attach rows without an answer"):
            remaps, attached, ambiguous = _attach_answerless(ex, vertices, verified_links, p)
    with ex.stage(step.name, "representatives (shuffle on cluster label)"):
        by_label = [ex.call(_route_vertices, p, vertices[q], p) for q in range(p)]
        finals = [
            ex.call(_final_labels, p, remaps[t], p, *[b[t] for b in by_label]) for t in range(p)
        ]
        clusters = [
            ex.call(_clusters, 1 + 2 * nb, starts, *[f[t] for f in finals]) for t in range(p)
        ]
        with_duplicates = sum(ex.get([c[0] for c in clusters]))
    with ex.stage(step.name, "similarity to the representative"):
        sim_first = [
            ex.call(
                _pairs_first_end,
                1 + 2 * nb,
                blocks[j][0],
                starts,
                len(clusters),
                sigs[j],
                mapped[j][1],
                *[c[1 + j] for c in clusters],
                *[_empty_pairs_ref(ex)] * len(clusters),
            )
            for j in range(nb)
        ]
        sim = [
            ex.call(
                _pairs_second_end,
                3,
                blocks[k][0],
                -1.0,
                "none",
                nb,
                sigs[k],
                mapped[k][1],
                *[f[1 + k] for f in sim_first],
                *[f[1 + nb + k] for f in sim_first],
            )
            for k in range(nb)
        ]
    with ex.stage(step.name, "assemble"):
        named = [
            ex.call(_similar_with_rep_ids, nb, ref, start, params["id_column"], starts, sim[k][0])
            for k, (start, ref) in enumerate(blocks)
        ]
        outs = [
            ex.call(
                _near_assemble,
                3,
                ref,
                start,
                len(clusters),
                *[c[1 + nb + j] for c in clusters],
                *[s[j] for s in named],
            )
            for j, (start, ref) in enumerate(blocks)
        ]
        result = ex.collect(outs, stats={})
    result.stats = {
        "rows_in": n,
        "rows_out": result.kept.height,
        "dropped": result.dropped.height,
        "bands": settings["bands"],
        "rows_per_band": settings["rows"],
        "threshold": threshold,
        "candidate_pairs": int(candidates[0] + candidates[1]),
        "verified_pairs": int(verified[0] + verified[1]),
        "clusters_with_duplicates": int(with_duplicates),
        "answerless_clusters_attached": int(attached),
        "answerless_clusters_ambiguous": int(ambiguous),
        "keep_apart": list(params["keep_apart"]),
    }
    return result


def _head(block: Any) -> Any:
    return block.slice(0, 1) if hasattr(block, "slice") else as_frame(block).head(1)


def _near_block(block: Any, start: int, s: dict[str, Any], parts: int) -> Any:
    """A block's signatures, its rows' reference flags, and its band keys cut by key: the
    `same` keys (band key and answer) and the `link` keys (without the answer)."""
    block = as_frame(block)
    n = block.height
    sketch = sketch_rows(
        block,
        text_column=s["text_column"],
        num_perm=s["num_perm"],
        ngram=s["ngram"],
        shingle=s["shingle"],
        scheme=s["scheme"],
        seed=s["seed"],
        keep_apart=s["keep_apart"],
        reference_columns=s["reference_columns"],
    )
    no_answer = sketch.no_answer
    rows = np.arange(start, start + n, dtype=np.int64)
    meta = {"no_answer": no_answer, "has_ref": reference_mask(block, s["reference_columns"])}
    answer_mix = mix64(sketch.answer_hash.copy())
    same_keys, link_keys = [], []
    for h in band_keys(sketch.sig, s["bands"], s["rows"], sketch.side):
        same_keys.append(h ^ answer_mix)
        link_keys.append(h)
    band = np.repeat(np.arange(s["bands"], dtype=np.int16), n)
    same = {"band": band, "key": np.concatenate(same_keys), "row": np.tile(rows, s["bands"])}
    link = {**same, "key": np.concatenate(link_keys), "no_answer": np.tile(no_answer, s["bands"])}
    if "answer" not in s["keep_apart"]:
        link = {k: v[:0] for k, v in link.items()}
    cut = np.uint64(parts)
    return (
        sketch.sig,
        meta,
        (int(no_answer.sum()), int((~no_answer).sum())),
        *split_columns(same, (same["key"] % cut).astype(np.int64), parts),
        *split_columns(link, (link["key"] % cut).astype(np.int64), parts),
    )


def _band_buckets(starts: np.ndarray, links: bool, *parts: Columns) -> Any:
    """Star edges of every (band, key) bucket of one key partition, as `near_dedup` forms
    them: each row to the bucket's first row (`same` keys), or each row without an answer to
    the bucket's first row when that row has one (`link` keys, answered rows first). Pairs
    are cut by the block of their first row (where its signature lives)."""
    cols = concat_columns(parts)
    found = []
    if cols and cols["row"].size:
        # Blocks arrive in row order, each band's rows ascending: a stable sort by band
        # leaves every band's rows in row order.
        order = np.argsort(cols["band"], kind="stable")
        cols = {k: v[order] for k, v in cols.items()}
        edges = np.flatnonzero(np.diff(cols["band"])) + 1
        for lo, hi in zip(np.r_[0, edges], np.r_[edges, cols["band"].size], strict=True):
            keys, rows = cols["key"][lo:hi], cols["row"][lo:hi]
            if not links:
                a, b = star_edges(keys, np.arange(keys.size, dtype=np.int64))
                found.append(pack_pairs(rows[a], rows[b]))
            else:
                no_answer = cols["no_answer"][lo:hi]
                answered_first = np.argsort(no_answer, kind="stable").astype(np.int64)
                a, b = star_edges(keys, answered_first)
                cross = no_answer[a] & ~no_answer[b]
                found.append(pack_ordered(rows[a[cross]], rows[b[cross]]))
    packed = sorted_unique(np.concatenate(found)) if found else np.zeros(0, np.uint64)
    first_end = (packed >> np.uint64(32)).astype(np.int64)
    pairs = {"pair": packed}
    return as_returns(split_by_block(pairs, first_end, starts))


def _pairs_first_end(
    start: int,
    starts: np.ndarray,
    same_parts: int,
    sig: np.ndarray,
    meta: Columns,
    *parts: Columns,
) -> Any:
    """Pairs whose first row is in this block: distinct pairs counted, each with its first
    row's signature and flags, cut by the block of its second row."""
    out = []
    counts = []
    for group in (parts[:same_parts], parts[same_parts:]):
        cols = concat_columns(group)
        packed = sorted_unique(cols["pair"]) if cols else np.zeros(0, np.uint64)
        counts.append(int(packed.size))
        a = (packed >> np.uint64(32)).astype(np.int64)
        b = (packed & MASK32).astype(np.int64)
        local = a - start
        pairs = {
            "a": a,
            "b": b,
            "sig_a": sig[local],
            "no_answer_a": meta["no_answer"][local],
            "has_ref_a": meta["has_ref"][local],
        }
        out.append(split_by_block(pairs, b, starts))
    return (tuple(counts), *out[0], *out[1])


def _pairs_second_end(
    start: int,
    threshold: float,
    verify: str,
    blocks: int,
    sig: np.ndarray,
    meta: Columns,
    *parts: Columns,
) -> tuple:
    """Pairs whose second row is in this block: signature agreement (`near_dedup`'s
    estimate, float32), kept when it reaches the threshold (`verify="estimate"`)."""
    out = []
    for group in (parts[:blocks], parts[blocks:]):
        cols = concat_columns(group)
        if not cols or cols["a"].size == 0:
            out.append(_no_pairs())
            continue
        local = cols["b"] - start
        agreement = (cols["sig_a"] == sig[local]).mean(axis=1).astype(np.float32)
        keep = agreement >= threshold if verify == "estimate" else np.ones(local.size, bool)
        out.append(
            {
                "a": cols["a"][keep],
                "b": cols["b"][keep],
                "agreement": agreement[keep],
                "no_answer_a": cols["no_answer_a"][keep],
                "has_ref_a": cols["has_ref_a"][keep],
                "no_answer_b": meta["no_answer"][local[keep]],
                "has_ref_b": meta["has_ref"][local[keep]],
            }
        )
    return out[0], out[1], (int(out[0]["a"].size), int(out[1]["a"].size))


def _endpoint_flags(edges: Columns, parts: int) -> Any:
    """Both ends of each verified edge with their flags, cut by vertex partition."""
    cols = {
        "vertex": np.concatenate([edges["a"], edges["b"]]),
        "no_answer": np.concatenate([edges["no_answer_a"], edges["no_answer_b"]]),
        "has_ref": np.concatenate([edges["has_ref_a"], edges["has_ref_b"]]),
    }
    return as_returns(split_columns(cols, cols["vertex"] % parts, parts))


def _vertex_table(labels: Columns, *flags: Columns) -> Columns:
    """A vertex partition's vertices with their component label and flags."""
    cols = concat_columns(flags)
    vertex, first = np.unique(cols["vertex"], return_index=True)
    if not np.array_equal(vertex, labels["vertex"]):
        raise RuntimeError("near dedup: the component labels and the vertex flags disagree")
    return {
        "vertex": vertex,
        "label": labels["label"],
        "no_answer": cols["no_answer"][first],
        "has_ref": cols["has_ref"][first],
    }


def _attach_answerless(
    ex: RayExecutor, vertices: list[Any], links: list[Any], p: int
) -> tuple[list[Any], int, int]:
    """`near_dedup`'s attachment: an answerless cluster linked (by verified link pairs) to
    exactly one answered cluster joins it. Returns the remap per label partition."""
    answered = [ex.call(_label_answers, p, v, p) for v in vertices]
    comp_answered = [ex.remote(_any_answer).remote(*[a[t] for a in answered]) for t in range(p)]
    with_a = lookup(ex, links, "a", vertices, "vertex", {"label_a": ("label", -1)})
    with_b = lookup(ex, with_a, "b", vertices, "vertex", {"label_b": ("label", -1)})
    fixed = [ex.remote(_own_label_if_absent).remote(part) for part in with_b]
    checked = lookup(
        ex, fixed, "label_a", comp_answered, "label", {"answered": ("answered", False)}
    )
    results = [ex.remote(_single_targets).remote(part) for part in checked]
    counts = np.array(ex.get([ex.remote(_remap_counts).remote(r) for r in results])).sum(axis=0)
    return results, int(counts[0]), int(counts[1])


def _label_answers(vertices: Columns, parts: int) -> Any:
    cols = {"label": vertices["label"], "answered": ~vertices["no_answer"]}
    return as_returns(split_columns(cols, vertices["label"] % parts, parts))


def _any_answer(*parts: Columns) -> Columns:
    cols = concat_columns(parts)
    labels, at = np.unique(cols["label"], return_inverse=True)
    answered = np.zeros(labels.size, dtype=np.bool_)
    np.logical_or.at(answered, at, cols["answered"])
    return {"label": labels, "answered": answered}


def _own_label_if_absent(cols: Columns) -> Columns:
    """A row in no verified pair is its own cluster: its label is itself."""
    cols = dict(cols)
    for end in ("a", "b"):
        label = cols[f"label_{end}"]
        cols[f"in_graph_{end}"] = label >= 0
        cols[f"label_{end}"] = np.where(label < 0, cols[end], label)
    return cols


def _single_targets(cols: Columns) -> Columns:
    """Per answerless cluster (all of its links are in this partition), its answered target
    when it links to exactly one: the remap, with whether each end is a row in no verified
    pair (it then joins the cluster as a vertex of its own) and that row's reference flag."""
    names = ("label_a", "label_b", "in_graph_a", "in_graph_b", "has_ref_a", "has_ref_b")
    links = pl.DataFrame({k: cols[k] for k in names}).filter(~pl.Series(cols["answered"]))
    if links.height == 0:
        return _no_remap()
    targets = links.group_by("label_a").agg(pl.col("label_b").n_unique().alias("targets"))
    single = targets.filter(pl.col("targets") == 1).select("label_a")
    remap = (
        links.join(single, on="label_a").sort("label_a", "label_b").unique("label_a", keep="first")
    ).sort("label_a")
    return {
        "label": remap["label_a"].to_numpy(),
        "target": remap["label_b"].to_numpy(),
        "label_in_graph": remap["in_graph_a"].to_numpy(),
        "label_has_ref": remap["has_ref_a"].to_numpy(),
        "target_in_graph": remap["in_graph_b"].to_numpy(),
        "target_has_ref": remap["has_ref_b"].to_numpy(),
        "ambiguous": np.array([int((targets["targets"] > 1).sum())], np.int64),
    }


def _remap_counts(remap: Columns) -> tuple[int, int]:
    return int(remap["label"].size), int(remap["ambiguous"].sum())


def _route_vertices(vertices: Columns, parts: int) -> Any:
    cols = {k: vertices[k] for k in ("vertex", "label", "has_ref")}
    return as_returns(split_columns(cols, cols["label"] % parts, parts))


def _final_labels(remap: Columns, parts: int, *routed: Columns) -> Any:
    """Vertices of one label partition with their final label (the attachment applied); an
    attached row that was in no verified pair becomes a vertex here. Cut by final label."""
    cols = concat_columns(routed)
    labels = cols["label"]
    at = np.searchsorted(remap["label"], labels)
    at = np.minimum(at, max(remap["label"].size - 1, 0))
    hit = remap["label"].size > 0
    final = labels.copy()
    if hit:
        found = remap["label"][at] == labels
        final[found] = remap["target"][at[found]]
        # rows in no verified pair: an attached answerless row, an answered target
        lone, target = ~remap["label_in_graph"], ~remap["target_in_graph"]
        cols = {
            "vertex": np.concatenate(
                [cols["vertex"], remap["label"][lone], remap["target"][target]]
            ),
            "has_ref": np.concatenate(
                [cols["has_ref"], remap["label_has_ref"][lone], remap["target_has_ref"][target]]
            ),
        }
        final = np.concatenate([final, remap["target"][lone], remap["target"][target]])
    else:
        cols = {"vertex": cols["vertex"], "has_ref": cols["has_ref"]}
    cols["label"] = final
    return as_returns(split_columns(cols, final % parts, parts))


def _clusters(starts: np.ndarray, *parts: Columns) -> Any:
    """Clusters of one final-label partition: how many have duplicates, each
    non-representative with its representative (cut by the block of the non-representative,
    to fetch signatures), and each non-representative's cluster size (cut the same way)."""
    cols = concat_columns(parts)
    _, first = np.unique(cols["vertex"], return_index=True)  # a target may come twice
    cols = {k: v[first] for k, v in cols.items()}
    _, labels = np.unique(cols["label"], return_inverse=True)
    labels = labels.astype(np.int64)
    rep = representatives(labels, cols["has_ref"])
    sizes = np.bincount(labels)
    vertex = cols["vertex"]
    moved = rep != np.arange(rep.size)
    pairs = {"pair": pack_ordered(vertex[moved], vertex[rep[moved]])}
    member = {"row": vertex[moved], "size": sizes[labels[moved]].astype(np.int64)}
    return (
        int((sizes > 1).sum()),
        *split_by_block(pairs, vertex[moved], starts),
        *split_by_block(member, vertex[moved], starts),
    )


def _similar_with_rep_ids(
    block: Any, start: int, id_column: str, starts: np.ndarray, similar: Columns
) -> Any:
    """(duplicate, representative) pairs whose representative is in this block, with its id
    and the signature agreement, cut by the block of the duplicate."""
    ids = as_frame(block).get_column(id_column).cast(pl.String)
    found = pl.DataFrame(
        {
            "row": similar["a"],
            "rep_id": ids.gather(similar["b"] - start),
            "agreement": similar["agreement"],
        }
    )
    which = np.searchsorted(starts, similar["a"], side="right") - 1
    return as_returns([f.to_arrow() for f in cut_frame(found, which, starts.size - 1)])


def _near_assemble(block: Any, start: int, partitions: int, *parts: Any) -> tuple:
    """One block's kept rows and its near duplicates (as `split_clusters` marks them, with
    `jaccard_estimate`), in the block's order: their cluster sizes from each label
    partition, then their representatives' ids and similarities from each block."""
    frame = as_frame(block)
    members = concat_columns(parts[:partitions])
    order = np.argsort(members["row"], kind="stable")
    rows, sizes = members["row"][order], members["size"][order]
    similar = _stacked(parts[partitions:]).sort("row")
    if not np.array_equal(similar["row"].to_numpy(), rows):
        raise RuntimeError("near dedup: the cluster members and their similarities disagree")
    dropped = mark_duplicates(
        frame,
        rows - start,
        similar["rep_id"],
        sizes,
        reason="near_duplicate",
        prefix="near:",
        extra={"jaccard_estimate": similar["agreement"].to_numpy().astype(np.float32)},
    )
    kept = _kept_rows(frame, rows - start)
    return block_outputs(StepResult(kept=kept, dropped=dropped))


# -- small pieces ----------------------------------------------------------------------------


def _no_pairs() -> Columns:
    empty_i, empty_b = np.empty(0, np.int64), np.empty(0, np.bool_)
    return {
        "a": empty_i,
        "b": empty_i,
        "agreement": np.empty(0, np.float32),
        "no_answer_a": empty_b,
        "has_ref_a": empty_b,
        "no_answer_b": empty_b,
        "has_ref_b": empty_b,
    }


def _empty_pairs_ref(ex: RayExecutor) -> Any:
    return ex.shared("empty-pairs", lambda: {"pair": np.zeros(0, np.uint64)})


def _no_remap() -> Columns:
    empty_i, empty_b = np.empty(0, np.int64), np.empty(0, np.bool_)
    return {
        "label": empty_i,
        "target": empty_i,
        "label_in_graph": empty_b,
        "label_has_ref": empty_b,
        "target_in_graph": empty_b,
        "target_has_ref": empty_b,
        "ambiguous": np.zeros(1, np.int64),
    }


def _empty_remap_ref(ex: RayExecutor) -> Any:
    return ex.shared("empty-remap", _no_remap)
