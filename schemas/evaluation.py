"""Contract of the `evaluations` table: one row per scored sample of a model on a benchmark
item, with everything needed to recompute a score or join back to training data."""

from __future__ import annotations

import pyarrow as pa

from schemas.tables import TableContract, register_contract

EVALUATIONS = TableContract(
    kind="evaluations",
    schema=pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("model", pa.string(), nullable=False),
            pa.field("model_identity", pa.string(), nullable=False),
            pa.field("benchmark", pa.string(), nullable=False),
            pa.field("benchmark_hash", pa.string(), nullable=False),
            pa.field("item_id", pa.string(), nullable=False),
            pa.field("sample_index", pa.int64(), nullable=False),
            pa.field("mode", pa.string(), nullable=False),
            pa.field("response", pa.string()),
            pa.field("passed", pa.bool_()),
            pa.field("score", pa.float64()),
            pa.field("detail", pa.string()),
            pa.field("completion_tokens", pa.int64()),
            pa.field("truncated", pa.bool_()),
            pa.field("verifier", pa.string(), nullable=False),
            pa.field("preset", pa.string(), nullable=False),
            pa.field("settings_key", pa.string(), nullable=False),
            pa.field("settings", pa.string(), nullable=False),
            pa.field("generation_id", pa.string(), nullable=False),
        ]
    ),
    description=(
        "A model's scored samples on benchmarks: id (of model identity, benchmark hash, item, "
        "sample and settings), model (as named) and model_identity (hub id, or a local "
        "model's name@content hash), benchmark and benchmark_hash (sha256 of its file), "
        "item_id, sample_index, mode, response, passed (null: undecided), score, detail (why), "
        "completion_tokens, truncated, verifier, preset, settings_key and settings (JSON: "
        "mode, k, temperature, top-p, budget, seed, system prompt) and generation_id (the "
        "row of the generations table it scored)."
    ),
)

register_contract(EVALUATIONS)
