"""Contract of `preference_pairs` tables: one (prompt, chosen, rejected) pair per row.

What a reward-model stage reads. Built by the `preference_pairs` recipe (human sets:
HelpSteer3's signed preferences, HelpSteer2's per-response ratings) and by `rm_offtopic_pairs`
(synthetic off-topic pairs); read by `rlhf_prompts` (the RLHF prompt set is a subset of these
prompts). Several such tables (one per source or recipe) make one reward-model training set.
"""

from __future__ import annotations

import pyarrow as pa

from schemas.tables import TableContract, register_contract

PREFERENCE_PAIRS = TableContract(
    kind="preference_pairs",
    schema=pa.schema(
        [
            pa.field("uid", pa.string(), nullable=False),
            pa.field("prompt_uid", pa.string(), nullable=False),
            pa.field("prompt_id", pa.string(), nullable=False),
            pa.field("source", pa.string(), nullable=False),
            pa.field("source_rows", pa.list_(pa.string()), nullable=False),
            pa.field("method", pa.string(), nullable=False),
            pa.field("prompt", pa.string(), nullable=False),
            pa.field("messages", pa.string(), nullable=False),
            pa.field("chosen", pa.string(), nullable=False),
            pa.field("rejected", pa.string(), nullable=False),
            pa.field("margin", pa.float64()),
            pa.field("category", pa.string()),
            pa.field("metadata", pa.string()),
        ]
    ),
    description=(
        "One preference pair per row; a reward model learns r(messages, chosen) > "
        "r(messages, rejected). uid: unique pair id (`<row uid>` when a source row gives one "
        "pair, `<chosen row uid>><rejected row uid>` when two rated rows make it). "
        "prompt_uid: the input row the pair was made from (several pairs may share one). "
        "prompt_id: hash of the normalized context (for one user turn, the prompts `id` of "
        "that text); hold-out splits and per-prompt grouping use it. source: the set the "
        "pair came from (the ingested file's stem or table name); source_rows: the source "
        "rows it was built from (chosen's row first when there are two). method: how the "
        "preference was obtained: `signed_preference` (pairwise human score), "
        "`attribute_rating:<attribute>` (difference of per-response ratings), "
        "`off_topic_rewrite` (weak model on the prompt vs strong model on a rewrite judged "
        "different). prompt: the final user turn; messages: the whole context the responses "
        "answer, a JSON list of {role, content} ending with that user turn (render it with "
        "the reward model's chat template, then append chosen or rejected as the assistant "
        "turn). chosen/rejected: the final answers (no <think> part). margin: strength of "
        "the preference where the source has one (|score| of a signed preference, the "
        "rating difference), else null. category: the source's own domain or category "
        "(HelpSteer3 `domain`), else null. metadata: JSON object of the source fields not "
        "lifted into columns (ratings, annotator details, ...). Recipes add their own "
        "columns (source_id, decontamination measurements, off-topic lineage: rewrite, "
        "judge_verdict, chosen_model, rejected_model and generation ids)."
    ),
)

register_contract(PREFERENCE_PAIRS)
