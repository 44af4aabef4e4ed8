"""SWE patch verifier: execution-free similarity of a predicted patch to the gold patch.

Patches are parsed with unidiff and compared as sequences of changed lines
(`path`, `+`/`-`, text without trailing whitespace), so headers, hunk offsets, context lines
and line-ending noise do not matter. Reward: 1 for the same changes, 0 for an empty or no-op
patch, -1 when the response holds no parsable patch, otherwise the difflib similarity of the
changed-line sequences, in [0, 1). `shaped=True` maps similarities below 0.5 to 0 (the -1
format penalty is kept).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from typing import Any

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from curation.verify.result import Verdict, completion_text, final_answer_part

_DIFF_FENCE = re.compile(r"```(?:diff|patch)?[^\n]*\n(.*?)```", re.DOTALL)


def extract_patch(response: str) -> str:
    """The patch in a response: the last ```diff block after `</think>`, or the text itself."""
    text = final_answer_part(response)
    blocks = [b for b in _DIFF_FENCE.findall(text) if re.search(r"^(---|\+\+\+|@@) ", b, re.M)]
    return blocks[-1] if blocks else text


def _path(name: str) -> str:
    return re.sub(r"^[ab]/", "", name.strip())


def changed_lines(patch: str) -> list[str] | None:
    """Changed lines as `path|+text` / `path|-text`; None if unparsable, [] if no change."""
    if not patch.strip():
        return []
    try:
        patch_set = PatchSet(patch)
    except (UnidiffParseError, ValueError) as exc:
        del exc
        return None
    if not len(patch_set):
        return None  # non-empty text without any file diff in it
    lines: list[str] = []
    for patched_file in patch_set:
        path = _path(
            patched_file.target_file
            if patched_file.target_file != "/dev/null"
            else patched_file.source_file
        )
        removed = [
            f"{path}|-{line.value.rstrip()}"
            for hunk in patched_file
            for line in hunk
            if line.is_removed
        ]
        added = [
            f"{path}|+{line.value.rstrip()}"
            for hunk in patched_file
            for line in hunk
            if line.is_added
        ]
        if [r[len(path) + 2 :] for r in removed] == [a[len(path) + 2 :] for a in added]:
            continue  # a no-op edit of this file
        for hunk in patched_file:
            for line in hunk:
                if line.is_removed or line.is_added:
                    sign = "-" if line.is_removed else "+"
                    lines.append(f"{path}|{sign}{line.value.rstrip()}")
    return lines


def patch_similarity(predicted: str, reference: str) -> float:
    """Reward in {-1} U [0, 1]: see the module docstring."""
    gold = changed_lines(reference)
    if not gold:
        raise ValueError("reference patch is empty or unparsable")
    pred = changed_lines(predicted)
    if pred is None:
        return -1.0
    if not pred:
        return 0.0
    if pred == gold:
        return 1.0
    ratio = difflib.SequenceMatcher(None, pred, gold, autojunk=False).ratio()
    return min(ratio, 0.999)


def verify_patch(
    response: str, reference: str, *, shaped: bool = False, pass_threshold: float = 0.5
) -> Verdict:
    """Verdict for a response's patch; passed when the score is above `pass_threshold`."""
    try:
        score = patch_similarity(extract_patch(response), reference)
    except ValueError as exc:  # the reference patch is unusable
        return Verdict(None, 0.0, str(exc), bad_input="reference")
    if score == -1.0:
        return Verdict(False, -1.0, "no parsable patch in the response")
    if score == 0.0 and not changed_lines(extract_patch(response)):
        return Verdict(False, 0.0, "empty or no-op patch")
    if shaped and score < 0.5:
        return Verdict(False, 0.0, f"similarity {score:.3f} < 0.5, shaped to 0")
    detail = "same changes as the reference" if score == 1.0 else f"similarity {score:.3f}"
    return Verdict(score > pass_threshold, score, detail)


def swe_reward(
    prompts: Sequence[Any],
    completions: Sequence[Any],
    patch: Sequence[str],
    shaped: bool = False,
    **_: Any,
) -> list[float | None]:
    """TRL-style reward: patch similarity to the gold `patch` column (see module docstring)."""
    return [
        verify_patch(completion_text(c), ref, shaped=shaped).reward()
        for c, ref in zip(completions, patch, strict=True)
    ]
