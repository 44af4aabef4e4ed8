"""Preference data for the reward model and the RLHF prompt set.

- `human`: human preference sets in their own shapes (HelpSteer3's signed pairwise scores,
  HelpSteer2's per-response ratings) turned into pairs; ties and malformed rows are drops.
- `offtopic`: the off-topic trick (rewrite, YES/NO judge, strong model on the rewrite vs
  weak model on the original).
- `pairs`: the pair rows every builder makes (`schemas.preferences` is their contract).
- `prompts`, `math_and_code`: the RLHF prompt set: prompts lifted from pairs, math and
  competitive-programming prompts excluded with evidence, a seeded subsample.
- `contexts`: a prompt's context as chat turns, whichever way a source spells it.
"""

from curation.preferences.contexts import ContextError, context_messages, context_text, user_text
from curation.preferences.human import (
    HELPSTEER2_ATTRIBUTES,
    group_rated_responses,
    pairs_from_ratings,
    pairs_from_signed_preferences,
)
from curation.preferences.math_and_code import (
    CODE_RULES,
    MATH_RULES,
    exclude_math_and_code,
    topic_evidence,
)
from curation.preferences.offtopic import (
    JUDGE_INSTRUCTION,
    REWRITE_INSTRUCTION,
    judge_rewrites,
    offtopic_pairs,
    parse_verdict,
    rewrite_prompts,
)
from curation.preferences.pairs import PAIR_COLUMNS, PairRow, pair_frame, select_pair_columns
from curation.preferences.prompts import prompts_from_pairs, subsample

__all__ = [
    "CODE_RULES",
    "HELPSTEER2_ATTRIBUTES",
    "JUDGE_INSTRUCTION",
    "MATH_RULES",
    "PAIR_COLUMNS",
    "REWRITE_INSTRUCTION",
    "ContextError",
    "PairRow",
    "context_messages",
    "context_text",
    "exclude_math_and_code",
    "group_rated_responses",
    "judge_rewrites",
    "offtopic_pairs",
    "pair_frame",
    "pairs_from_ratings",
    "pairs_from_signed_preferences",
    "parse_verdict",
    "prompts_from_pairs",
    "rewrite_prompts",
    "select_pair_columns",
    "subsample",
    "topic_evidence",
    "user_text",
]
