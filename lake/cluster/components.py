"""Connected components on the cluster, by iterative min-label propagation over an edge list
partitioned by vertex (`connected_components`; near dedup's clusters). Each round moves only
the labels that fell; the driver holds refs and one count per partition per round.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from lake.cluster.executor import RayExecutor
from lake.cluster.partitions import Columns, as_returns, concat_columns, split_columns


def connected_components(ex: RayExecutor, edges: Sequence[Any], partitions: int) -> list[Any]:
    """Connected components of an edge list, by iterative min-label propagation.

    `edges`: refs of column dicts with `a` and `b` (int64 vertex ids), partitioned in any
    way. Returns one ref per vertex partition (`vertex % partitions`) of a column dict
    `vertex` (sorted) / `label`: every vertex that has an edge, labelled with the smallest
    vertex of its component (the labels `curation.dedup` computes locally). Each round,
    vertices whose label fell send it to their neighbours; rounds stop when no label
    changes (about the graph's diameter). The driver holds only refs and one count per
    partition per round.
    """
    import ray

    p = max(1, partitions)
    routed = [ex.call(_route_edges, p, part, p) for part in edges]
    states = []
    messages: list[list[Any]] = []
    for q in range(p):
        out = ex.call(_init_labels, 2 + p, p, *[r[q] for r in routed])
        states.append(out[0])
        messages.append(out[2:])
    rounds = 0
    while True:
        rounds += 1
        results = [
            ex.call(_propagate_labels, 2 + p, states[q], p, *[m[q] for m in messages])
            for q in range(p)
        ]
        changed = sum(ray.get([r[1] for r in results]))
        states = [r[0] for r in results]
        messages = [r[2:] for r in results]
        if changed == 0:
            break
    ex.component_rounds.append(rounds)
    return [ex.remote(_labels_of_state).remote(s) for s in states]


def _route_edges(columns: Columns, count: int) -> Any:
    """Both directions of each edge, cut by the source vertex's partition."""
    src = np.concatenate([columns["a"], columns["b"]]).astype(np.int64)
    dst = np.concatenate([columns["b"], columns["a"]]).astype(np.int64)
    return as_returns(split_columns({"src": src, "dst": dst}, src % count, count))


def _init_labels(count: int, *incoming: Columns) -> tuple:
    """A vertex partition's state (its edges sorted by source, its vertices' labels) and the
    first messages: every vertex's own id to each neighbour."""
    edges = concat_columns(incoming) or {"src": np.empty(0, np.int64), "dst": np.empty(0, np.int64)}
    order = np.lexsort((edges["dst"], edges["src"]))
    src, dst = edges["src"][order], edges["dst"][order]
    vertices = np.unique(src)
    state = {"src": src, "dst": dst, "vertex": vertices, "label": vertices.copy()}
    messages = split_columns({"vertex": dst, "label": src.copy()}, dst % count, count)
    return (state, len(vertices), *messages)


def _propagate_labels(state: Columns, count: int, *incoming: Columns) -> tuple:
    """One round: take the smallest label offered to each vertex; vertices whose label fell
    offer it to their neighbours."""
    got = concat_columns(incoming)
    vertex, label = state["vertex"], state["label"].copy()
    changed = np.zeros(vertex.size, dtype=np.bool_)
    if got and got["vertex"].size:
        at = np.searchsorted(vertex, got["vertex"])
        best = np.full(vertex.size, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(best, at, got["label"])
        changed = best < label
        label[changed] = best[changed]
    state = {**state, "label": label}
    moved = vertex[changed]
    src, dst = state["src"], state["dst"]
    lo = np.searchsorted(src, moved, side="left")
    hi = np.searchsorted(src, moved, side="right")
    take = _expand(lo, hi - lo)
    new_labels = np.repeat(label[changed], hi - lo)
    messages = split_columns({"vertex": dst[take], "label": new_labels}, dst[take] % count, count)
    return (state, int(changed.sum()), *messages)


def _labels_of_state(state: Columns) -> Columns:
    return {"vertex": state["vertex"], "label": state["label"]}


def _expand(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """starts[i] .. starts[i] + counts[i] - 1, concatenated."""
    total = int(counts.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    ends = np.cumsum(counts)
    return np.repeat(starts - ends + counts, counts) + np.arange(total, dtype=np.int64)
