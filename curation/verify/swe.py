"""SWE patch verifier: execution-free similarity of a predicted patch to the gold patch.

A response proposes a patch in one of two forms:

- SEARCH/REPLACE edits inside `<solution>...</solution>` after `<think>...</think>` (the
  format the repair prompts ask for, Agentless style: a `### path/to/file.py` line, then
  `<<<<<<< SEARCH`, the lines as they are, `=======`, the lines as they should be,
  `>>>>>>> REPLACE`). They are applied to the files the prompt showed (each SEARCH text must
  be found; the first occurrence is replaced; an empty SEARCH creates a file) and turned into
  a unified diff. They take precedence: once the answer after `</think>` holds a
  `<<<<<<< SEARCH` marker, edits that cannot be read or applied score -1.
- otherwise the last ```diff block after `</think>`, or that text itself, as a unified diff.

Patches are parsed with unidiff and compared as sequences of changed lines
(`path`, `+`/`-`, text without trailing whitespace), so headers, hunk offsets, context lines
and line-ending noise do not matter. Reward (recipe 7.3, lexical): 1 for the same changes,
0 for an empty or no-op patch, -1 when the response holds no parsable patch or unusable
edits (the format penalty), otherwise the difflib similarity of the changed-line sequences,
in [0, 1). `shaped=True` maps similarities below 0.5 to 0 (the -1 format penalty is kept).
The semantic variant (an LLM judge for the in-between cases) is `curation.verify.patch_judge`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from curation.verify.result import Verdict, completion_text, final_answer_part

_DIFF_FENCE = re.compile(r"```(?:diff|patch)?[^\n]*\n(.*?)```", re.DOTALL)
_BLOCK = re.compile(
    r"^###[ \t]*(?P<path>[^\n]+?)[ \t]*\n(?:```[^\n]*\n)?<<<<<<< SEARCH[ \t]*\n"
    r"(?P<search>.*?)^=======[ \t]*\n(?P<replace>.*?)^>>>>>>> REPLACE",
    re.MULTILINE | re.DOTALL,
)
SEARCH_MARKER = "<<<<<<< SEARCH"


@dataclass(frozen=True)
class Edit:
    """One SEARCH/REPLACE block."""

    path: str
    search: str
    replace: str


class EditError(ValueError):
    """A response's edits cannot be read or applied; the message says which and why."""


def parse_repair(response: str) -> list[Edit]:
    """The edits of a repair response; EditError when the format is not followed.

    >>> r = "<think>fix it</think><solution>### a.py\\n<<<<<<< SEARCH\\nx = 1\\n=======\\nx = 2\\n>>>>>>> REPLACE\\n</solution>"
    >>> parse_repair(r)
    [Edit(path='a.py', search='x = 1\\n', replace='x = 2\\n')]
    """
    think_end = response.find("</think>")
    if response.find("<think>") < 0 or think_end < 0:
        raise EditError("no <think>...</think> block")
    start = response.find("<solution>", think_end)
    if start < 0:
        raise EditError("no <solution> after </think>")
    end = response.find("</solution>", start)
    if end < 0:
        raise EditError("<solution> is never closed")
    body = response[start + len("<solution>") : end]
    edits = [
        Edit(m["path"].strip().strip("`").removeprefix("./"), m["search"], m["replace"])
        for m in _BLOCK.finditer(body)
    ]
    if not edits:
        raise EditError("no SEARCH/REPLACE block in <solution>")
    return edits


def apply_edits(files: Mapping[str, str], edits: Sequence[Edit]) -> dict[str, str]:
    """The files after the edits, in order; EditError names the first edit that fails."""
    current = dict(files)
    for n, edit in enumerate(edits, start=1):
        text = current.get(edit.path)
        if text is None:
            if edit.search.strip():
                raise EditError(f"edit {n}: {edit.path} does not exist")
            current[edit.path] = edit.replace  # an empty SEARCH creates a file
            continue
        if not edit.search.strip():
            raise EditError(f"edit {n}: empty SEARCH for the existing file {edit.path}")
        if edit.search not in text:
            raise EditError(f"edit {n}: SEARCH text not found in {edit.path}")
        current[edit.path] = text.replace(edit.search, edit.replace, 1)
    return current


def unified_diff(before: Mapping[str, str], after: Mapping[str, str]) -> str:
    """A git-style unified diff from file texts before to after (new and deleted files too)."""
    chunks = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        lines = difflib.unified_diff(
            (old or "").splitlines(keepends=True),
            (new or "").splitlines(keepends=True),
            fromfile=f"a/{path}" if old is not None else "/dev/null",
            tofile=f"b/{path}" if new is not None else "/dev/null",
        )
        text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
        chunks.append(f"diff --git a/{path} b/{path}\n{text}")
    return "".join(chunks)


def edits_patch(files: Mapping[str, str], edits: Sequence[Edit]) -> str:
    """The unified diff that `edits` make to `files` (EditError when one does not apply)."""
    return unified_diff(files, apply_edits(files, edits))


def extract_patch(response: str) -> str:
    """The patch in a response: the last ```diff block after `</think>`, or the text itself."""
    text = final_answer_part(response)
    blocks = [b for b in _DIFF_FENCE.findall(text) if re.search(r"^(---|\+\+\+|@@) ", b, re.M)]
    return blocks[-1] if blocks else text


def has_edits(response: str) -> bool:
    """Whether the answer after `</think>` uses SEARCH/REPLACE edits (they take precedence)."""
    return SEARCH_MARKER in final_answer_part(response)


def response_patch(response: str, files: Mapping[str, str] | None) -> str:
    """The unified diff a response proposes (see the module docstring for the two forms).

    SEARCH/REPLACE edits are applied to `files` ({path: text} the prompt showed); EditError
    when they cannot be read or applied, ValueError when they need `files` and none are given.
    """
    if not has_edits(response):
        return extract_patch(response)
    if files is None:
        raise ValueError("SEARCH/REPLACE edits need the files the prompt showed; none are given")
    return edits_patch(files, parse_repair(response))


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


def score_patch(
    patch: str, reference: str, *, shaped: bool = False, pass_threshold: float = 0.5
) -> Verdict:
    """Verdict for a unified diff by the lexical rule; passed when the score is above
    `pass_threshold`; undecided (`bad_input="reference"`) when the gold patch is unusable."""
    try:
        score = patch_similarity(patch, reference)
    except ValueError as exc:  # the reference patch is unusable
        return Verdict(None, 0.0, str(exc), bad_input="reference")
    if score == -1.0:
        return Verdict(False, -1.0, "no parsable patch in the response")
    if score == 0.0 and not changed_lines(patch):
        return Verdict(False, 0.0, "empty or no-op patch")
    if shaped and score < 0.5:
        return Verdict(False, 0.0, f"similarity {score:.3f} < 0.5, shaped to 0")
    detail = "same changes as the reference" if score == 1.0 else f"similarity {score:.3f}"
    return Verdict(score > pass_threshold, score, detail)


def verify_patch(
    response: str,
    reference: str,
    *,
    files: Mapping[str, str] | None = None,
    shaped: bool = False,
    pass_threshold: float = 0.5,
) -> Verdict:
    """Verdict for a response's patch (its SEARCH/REPLACE edits applied to `files`, or its
    diff); -1 for edits that cannot be read or applied, undecided (`bad_input="files"`) for
    edits without the files to apply them to."""
    try:
        patch = response_patch(response, files)
    except EditError as exc:
        return Verdict(False, -1.0, f"unusable SEARCH/REPLACE edits: {exc}")
    except ValueError as exc:
        return Verdict(None, 0.0, str(exc), bad_input="files")
    return score_patch(patch, reference, shaped=shaped, pass_threshold=pass_threshold)


def shown_files(
    n: int,
    context_files: Sequence[Sequence[str] | None] | None,
    context_contents: Sequence[Sequence[str] | None] | None,
) -> list[dict[str, str] | None]:
    """Per row, {path: text} of the files its prompt showed, from the `context_files` and
    `context_contents` columns (None for a row, or all rows, without them)."""
    paths = context_files if context_files is not None else [None] * n
    texts = context_contents if context_contents is not None else [None] * n
    out: list[dict[str, str] | None] = []
    for i, (p, t) in enumerate(zip(paths, texts, strict=True)):
        if p is None or t is None:
            out.append(None)
        elif len(p) != len(t):
            raise ValueError(
                f"row {i}: context_files has {len(p)} paths but context_contents {len(t)} texts"
            )
        else:
            out.append(dict(zip(p, t, strict=True)))
    if len(out) != n:
        raise ValueError(f"{len(out)} rows of context files for {n} responses")
    return out


def swe_reward(
    prompts: Sequence[Any],
    completions: Sequence[Any],
    patch: Sequence[str],
    context_files: Sequence[Sequence[str] | None] | None = None,
    context_contents: Sequence[Sequence[str] | None] | None = None,
    shaped: bool = False,
    **_: Any,
) -> list[float | None]:
    """TRL-style reward: the lexical rule (see the module docstring) against the gold `patch`
    column; SEARCH/REPLACE edits are applied to the row's `context_files` /
    `context_contents` (the files its prompt showed, as the swe_rl recipe writes them)."""
    files = shown_files(len(completions), context_files, context_contents)
    return [
        verify_patch(completion_text(c), ref, files=f, shaped=shaped).reward()
        for c, ref, f in zip(completions, patch, files, strict=True)
    ]
