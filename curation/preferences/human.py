"""Human preference sets in their own shapes, turned into preference pairs.

Two shapes, with the field names of the sets on the Hugging Face Hub as defaults:

- Pairwise with a signed score (`nvidia/HelpSteer3`, preference config): one row holds the
  `context` (list of turns), `response1`, `response2` and `overall_preference` in -3..+3,
  negative when response 1 is better (-3: much better, -1: slightly), positive when response 2
  is; 0 means "about the same", a tie the Cascade recipe removes. The pair's margin is
  |score|, its category the row's `domain` (general, stem, code, multilingual).
- Per-response ratings (`nvidia/HelpSteer2`): one row per response with `prompt`, `response`
  and Likert ratings 0..4 of `helpfulness`, `correctness`, `coherence`, `complexity`,
  `verbosity`. Rows of the same prompt are grouped (`group_rated_responses`), then every two
  responses whose rating of the chosen attribute differs make a pair
  (`pairs_from_ratings`), the higher rated one chosen, the margin the rating difference.

Ingest keeps every field it does not map in the row's `metadata` JSON; these operators read a
field from `metadata` if it is there, else from a column (`source_field`). A row whose field is missing or of
the wrong type is dropped as `malformed`, the detail naming the field and what is wrong.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import polars as pl

from curation.preferences.contexts import ContextError, context_messages, context_text
from curation.preferences.pairs import PairRow, drops_frame, json_object, pair_frame
from curation.prompt_ids import prompt_id_text
from lake.steps import StepResult

HELPSTEER2_ATTRIBUTES = ("helpfulness", "correctness", "coherence", "complexity", "verbosity")


def source_field(row: dict[str, Any], meta: dict[str, Any], name: str) -> Any:
    """A source field's value: the row's metadata key (the source's own fields, exactly as
    given) if it has one, else the column (`problem`, or a field a recipe lifted). Metadata
    first, because a source field may share a name with a prompts column (HelpSteer3's
    `domain` is not the prompts `domain`)."""
    return meta[name] if name in meta else row.get(name)


class _Malformed(ValueError):
    def __init__(self, field: str, error: str) -> None:
        super().__init__(error)
        self.field = field


def _required_text(row: dict[str, Any], meta: dict[str, Any], name: str) -> str:
    value = source_field(row, meta, name)
    if value is None:
        raise _Malformed(name, f"field {name!r} is missing or null")
    if not isinstance(value, str):
        raise _Malformed(name, f"field {name!r} is a {type(value).__name__}, expected text")
    if not value.strip():
        raise _Malformed(name, f"field {name!r} is empty")
    return value


def _integer_in(row: dict[str, Any], meta: dict[str, Any], name: str, low: int, high: int) -> int:
    value = source_field(row, meta, name)
    if value is None:
        raise _Malformed(name, f"field {name!r} is missing or null")
    number = _number(value)
    if number is None or number != int(number):
        raise _Malformed(name, f"field {name!r} is {value!r}, expected an integer")
    value = number
    if not low <= value <= high:
        raise _Malformed(name, f"field {name!r} is {value}, outside {low}..{high}")
    return int(value)


def _number(value: Any) -> float | None:
    """A number, or the text of one: ingest turns a whole column into text when some of its
    rows hold text (`"high"` next to `4` becomes `"high"` next to `"4"`)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        return number if number == number and abs(number) != float("inf") else None
    return None


def _as_rating(value: Any) -> Any:
    """A rating as a number (an int when whole) when it is one, else as given."""
    number = _number(value)
    if number is None:
        return value
    return int(number) if number == int(number) else number


def _metadata(row: dict[str, Any]) -> dict[str, Any]:
    try:
        return json_object(row.get("metadata"))
    except ValueError as exc:
        raise _Malformed("metadata", f"metadata is not a JSON object ({exc})") from None


def _context(
    row: dict[str, Any], meta: dict[str, Any], name: str, label: str | None
) -> list[dict[str, str]]:
    value = source_field(row, meta, name)
    try:
        return context_messages(value)
    except ContextError as exc:
        label = label or name
        raise _Malformed(label, f"field {label!r}: {exc}") from None


def _check_fields(df: pl.DataFrame, names: Sequence[str], what: str) -> None:
    """Fail at once (not row by row) when no row has a field: the wrong shape was given."""
    if not df.height:
        return
    for name in names:
        if name in df.columns:
            continue
        found = any(name in _safe_keys(raw) for raw in df.get_column("metadata").to_list())
        if not found:
            raise ValueError(
                f"{what}: no row has field {name!r} (not a column, not in metadata); "
                f"columns are {df.columns}"
            )


def _safe_keys(raw: str | None) -> set[str]:
    try:
        return set(json_object(raw))
    except ValueError:
        return set()


def pairs_from_signed_preferences(
    df: pl.DataFrame,
    *,
    context_field: str = "problem",
    context_name: str | None = None,
    first_field: str = "response1",
    second_field: str = "response2",
    score_field: str = "overall_preference",
    category_field: str | None = "domain",
    score_range: tuple[int, int] = (-3, 3),
    negative_prefers_first: bool = True,
) -> StepResult:
    """One pair per row of a pairwise set with a signed preference score (HelpSteer3).

    The sign says which response is better (`negative_prefers_first`: HelpSteer3's
    convention, -3 = response 1 much better); |score| becomes `margin`. Drops: `tie` (score 0),
    `identical_responses` (both responses the same text: no preference to learn),
    `malformed` (a missing or mistyped field, a score outside `score_range`, a context that is
    not turns ending with the user's). The pair's uid is the row's uid; fields other than the
    ones read stay in the pair's metadata. `context_name` is how a drop names the context
    field (the source's own name for the field ingest mapped to `problem`).
    """
    _check_fields(df, (first_field, second_field, score_field), "signed preferences")
    low, high = score_range
    lifted = {context_field, first_field, second_field, score_field, category_field}
    pairs: list[PairRow] = []
    drops: list[dict[str, Any]] = []
    for row in df.iter_rows(named=True):
        uid = row["uid"]
        try:
            meta = _metadata(row)
            turns = _context(row, meta, context_field, context_name)
            first = _required_text(row, meta, first_field)
            second = _required_text(row, meta, second_field)
            score = _integer_in(row, meta, score_field, low, high)
            category = _optional_text(row, meta, category_field)
        except _Malformed as exc:
            drops.append({"uid": uid, "reason": "malformed", "field": exc.field, "error": str(exc)})
            continue
        if score == 0:
            error = f"{score_field} is 0: the responses were judged about the same"
            drops.append({"uid": uid, "reason": "tie", "field": score_field, "error": error})
            continue
        if first == second:
            error = f"{first_field} and {second_field} are the same text"
            drops.append(
                {"uid": uid, "reason": "identical_responses", "field": second_field, "error": error}
            )
            continue
        first_wins = (score < 0) == negative_prefers_first
        pairs.append(
            PairRow(
                uid=uid,
                prompt_uid=uid,
                source=row["source"],
                source_id=row.get("source_id"),
                source_rows=[uid],
                method="signed_preference",
                turns=turns,
                chosen=first if first_wins else second,
                rejected=second if first_wins else first,
                margin=float(abs(score)),
                category=category,
                metadata={
                    "chosen_field": first_field if first_wins else second_field,
                    score_field: score,
                    **{k: v for k, v in meta.items() if k not in lifted},
                },
            )
        )
    dropped = drops_frame(df, drops)
    stats = {
        "rows_in": df.height,
        "pairs": len(pairs),
        "first_chosen": sum(p.metadata["chosen_field"] == first_field for p in pairs),
    }
    return StepResult(kept=pair_frame(pairs), dropped=dropped, stats=stats)


def _optional_text(row: dict[str, Any], meta: dict[str, Any], name: str | None) -> str | None:
    if name is None:
        return None
    value = source_field(row, meta, name)
    if value is not None and not isinstance(value, str):
        raise _Malformed(name, f"field {name!r} is a {type(value).__name__}, expected text")
    return value


def group_rated_responses(
    df: pl.DataFrame,
    *,
    attribute: str = "helpfulness",
    prompt_field: str = "problem",
    prompt_name: str | None = None,
    response_field: str = "response",
    attributes: Sequence[str] = HELPSTEER2_ATTRIBUTES,
    rating_range: tuple[int, int] = (0, 4),
) -> StepResult:
    """One row per prompt of a per-response rated set (HelpSteer2), ready for pairing.

    Rows of the same prompt (same context after normalization) become one group kept under
    its first row's uid, with `responses`: a JSON list of {uid, response, ratings} in input
    order; the group's other rows are dropped as `grouped`, the detail naming `group_uid`
    (they are not lost: their responses are in the group's row). Drops: `malformed` (context,
    response or the `attribute` rating missing, mistyped or out of `rating_range`; a drop
    names the prompt field `prompt_name`, the source's own name for it, when given).
    Ratings are recorded as numbers when they are numbers or their text, else as given.
    """
    if attribute not in attributes:
        raise ValueError(f"attribute {attribute!r} is not one of the ratings {list(attributes)}")
    _check_fields(df, (response_field, attribute), "rated responses")
    low, high = rating_range
    drops: list[dict[str, Any]] = []
    groups: dict[str, dict[str, Any]] = {}
    for row in df.iter_rows(named=True):
        uid = row["uid"]
        try:
            meta = _metadata(row)
            turns = _context(row, meta, prompt_field, prompt_name)
            response = _required_text(row, meta, response_field)
            rating = _integer_in(row, meta, attribute, low, high)
        except _Malformed as exc:
            drops.append({"uid": uid, "reason": "malformed", "field": exc.field, "error": str(exc)})
            continue
        ratings = {a: _as_rating(source_field(row, meta, a)) for a in attributes}
        ratings[attribute] = rating
        key = prompt_id_text(context_text(turns))
        group = groups.get(key)
        if group is None:
            groups[key] = {"uid": uid, "turns": turns, "responses": []}
            group = groups[key]
        else:
            drops.append({"uid": uid, "reason": "grouped", "group_uid": group["uid"]})
        extra = {
            k: v for k, v in meta.items() if k not in {prompt_field, response_field, *attributes}
        }
        group["responses"].append(
            {"uid": uid, "response": response, "ratings": ratings, "metadata": extra}
        )
    leaders = pl.DataFrame(
        {
            "uid": [g["uid"] for g in groups.values()],
            "messages_turns": [_json(g["turns"]) for g in groups.values()],
            "responses": [_json(g["responses"]) for g in groups.values()],
        },
        schema={"uid": pl.String, "messages_turns": pl.String, "responses": pl.String},
    )
    kept = df.join(leaders, on="uid", how="inner", maintain_order="left")
    stats = {
        "rows_in": df.height,
        "prompts": len(groups),
        "responses_per_prompt": {
            str(n): sum(len(g["responses"]) == n for g in groups.values())
            for n in sorted({len(g["responses"]) for g in groups.values()})
        },
    }
    return StepResult(kept=kept, dropped=drops_frame(df, drops), stats=stats)


def pairs_from_ratings(df: pl.DataFrame, *, attribute: str = "helpfulness") -> StepResult:
    """Fan-out: every two responses of a group whose `attribute` ratings differ make a pair.

    The higher rated response is chosen, the margin is the rating difference, the pair's uid
    is `<chosen row uid>><rejected row uid>` and its prompt_uid the group's uid. A group
    with one response is dropped as `single_response`; one whose responses all have equal
    ratings as `tie`. Equal-rated pairs inside a group that yields other pairs, and pairs of
    identical texts, are counted in the stats (`tied_pairs`, `identical_pairs`).
    """
    pairs: list[PairRow] = []
    drops: list[dict[str, Any]] = []
    tied = identical = 0
    for row in df.iter_rows(named=True):
        uid = row["uid"]
        turns = json.loads(row["messages_turns"])
        responses = json.loads(row["responses"])
        if len(responses) < 2:
            error = "only one rated response to this prompt"
            drops.append({"uid": uid, "reason": "single_response", "error": error})
            continue
        made = 0
        ratings = [r["ratings"][attribute] for r in responses]
        for i, a in enumerate(responses):
            for b in responses[i + 1 :]:
                if a["ratings"][attribute] == b["ratings"][attribute]:
                    tied += 1
                    continue
                if a["response"] == b["response"]:
                    identical += 1
                    continue
                chosen, rejected = (
                    (a, b) if a["ratings"][attribute] > b["ratings"][attribute] else (b, a)
                )
                pairs.append(
                    PairRow(
                        uid=f"{chosen['uid']}>{rejected['uid']}",
                        prompt_uid=uid,
                        source=row["source"],
                        source_id=row.get("source_id"),
                        source_rows=[chosen["uid"], rejected["uid"]],
                        method=f"attribute_rating:{attribute}",
                        turns=turns,
                        chosen=chosen["response"],
                        rejected=rejected["response"],
                        margin=float(chosen["ratings"][attribute] - rejected["ratings"][attribute]),
                        metadata={
                            "chosen_ratings": chosen["ratings"],
                            "rejected_ratings": rejected["ratings"],
                            "chosen_metadata": chosen["metadata"],
                            "rejected_metadata": rejected["metadata"],
                        },
                    )
                )
                made += 1
        if not made:
            reason = "tie" if len(set(ratings)) == 1 else "identical_responses"
            error = f"{attribute} ratings {ratings} give no pair"
            drops.append({"uid": uid, "reason": reason, "field": attribute, "error": error})
    stats = {
        "prompts_in": df.height,
        "pairs": len(pairs),
        "tied_pairs": tied,
        "identical_pairs": identical,
    }
    return StepResult(kept=pair_frame(pairs), dropped=drops_frame(df, drops), stats=stats)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)
