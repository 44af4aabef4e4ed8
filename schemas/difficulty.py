"""Contract of the `difficulty` table: measured pass rates, one row per (prompt, model,
sampling, verifier, reference, tokenizer), the key under which a measurement is reused."""

from __future__ import annotations

import pyarrow as pa

from schemas.tables import TableContract, register_contract

DIFFICULTY = TableContract(
    kind="difficulty",
    schema=pa.schema(
        [
            pa.field("prompt_id", pa.string(), nullable=False),
            pa.field("model", pa.string(), nullable=False),
            pa.field("sampler_key", pa.string(), nullable=False),
            pa.field("verifier", pa.string(), nullable=False),
            pa.field("reference_hash", pa.string(), nullable=False),
            pa.field("tokenizer", pa.string(), nullable=False),
            pa.field("mode", pa.string(), nullable=False),
            pa.field("k", pa.int64(), nullable=False),
            pa.field("correct", pa.int64(), nullable=False),
            pa.field("undecided", pa.int64(), nullable=False),
            pa.field("pass_rate", pa.float64(), nullable=False),
            pa.field("mean_tokens", pa.float64()),
            pa.field("max_tokens", pa.int64()),
            pa.field("truncated_share", pa.float64()),
        ]
    ),
    description=(
        "Pass rate of a model on a prompt: prompt_id (the prompt's id), model, sampler_key "
        "(hash of mode, k, sampling parameters, seed and system prompt), verifier, "
        "reference_hash (of the reference it was scored against), tokenizer (of the token "
        "counts; empty = the model's own), then k samples, correct, undecided (verifier "
        "timeouts), pass_rate = correct / k, mean/max response tokens, truncated share."
    ),
)

register_contract(DIFFICULTY)
