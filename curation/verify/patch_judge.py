"""SWE RL's semantic reward (recipe 7.3): an LLM judge of patch equivalence, Kimi-Dev style.

Per response, the lexical rule of `curation.verify.swe` decides first: a patch that cannot be
read or applied scores -1 (the format penalty), one that leaves the code unchanged 0, one
with the same changes as the gold patch 1; no judge call is made for those. Every other
candidate is shown to the judge with the issue and the gold patch; it answers
`<judgement>YES</judgement>` or `<judgement>NO</judgement>`. The reward is P("YES"): read
from the top log-probs of the verdict token (the first token after `<judgement>`, its YES
and NO alternatives normalized to sum to 1) when the server returns log-probs, else 1 / 0
from the text. A judge that gives no verdict (cut off, off format) leaves the reward
undecided (None: the trainer skips that response rather than learn from a made-up 0).

The judge is any OpenAI-compatible chat server (vLLM / SGLang serving Kimi-Dev-72B, an API),
reached through `curation.generate.openai.OpenAIBackend`, greedy, one request per distinct
candidate (identical candidates in one call are judged once). A server error raises: a
reward that silently became 0 would train the policy on nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from curation.verify.result import Verdict, completion_text
from curation.verify.swe import EditError, changed_lines, response_patch, score_patch, shown_files
from schemas.generation import GenerationRequest, SamplingParams

JUDGE_TEMPLATE = """You are reviewing a candidate fix for a GitHub issue against the reference \
fix written by the maintainers.

### Issue
{issue}

### Reference patch
```diff
{reference}
```

### Candidate patch
```diff
{candidate}
```

Does the candidate patch change the code's behaviour in the same way as the reference patch, \
so that it resolves the issue equally well? Differences in formatting, comments, local names \
or the order of independent edits do not matter; a missing, extra or different behavioural \
change does. Think it through briefly, then answer with exactly one of \
<judgement>YES</judgement> or <judgement>NO</judgement>."""

OPEN = "<judgement>"
_VERDICT = re.compile(r"<judgement>\s*(YES|NO)\b", re.IGNORECASE)


def text_verdict(text: str) -> str | None:
    """The last `<judgement>YES|NO` in the judge's text, upper-cased; None when there is none.

    >>> text_verdict("hmm <judgement>no</judgement> wait <judgement>YES</judgement>")
    'YES'
    """
    found = _VERDICT.findall(text)
    return found[-1].upper() if found else None


def _says(token: str, word: str) -> bool:
    """Whether a token spells `word` or begins it ("Y" / "YES" / "YES<" for YES)."""
    s = token.strip().upper()
    return bool(s) and (s.startswith(word) or word.startswith(s))


def logprob_yes(top_logprobs: Sequence[Mapping[str, Any]]) -> float | None:
    """P(YES) / (P(YES) + P(NO)) over the verdict token's top alternatives; None when the
    tokens hold no `<judgement>` or its alternatives name neither YES nor NO.

    The verdict token is the first non-blank token after the last `<judgement>`; a token that
    also holds the tag's end (e.g. `>YES`) is compared after that shared prefix.
    """
    tokens = [str(t.get("token", "")) for t in top_logprobs]
    joined = "".join(tokens)
    at = joined.rfind(OPEN)
    if at < 0:
        return None
    start = at + len(OPEN)
    offset = 0
    for entry, token in zip(top_logprobs, tokens, strict=True):
        begin, offset = offset, offset + len(token)
        if offset <= start or not joined[max(begin, start) : offset].strip():
            continue  # before the verdict, or blank between the tag and it
        prefix = joined[begin:start] if begin < start else ""
        alternatives = entry.get("top_logprobs") or [entry]
        mass = {"YES": 0.0, "NO": 0.0}
        for alt in alternatives:
            text = str(alt.get("token", ""))
            if not text.startswith(prefix):
                continue
            for word in mass:
                if _says(text[len(prefix) :], word):
                    mass[word] += math.exp(float(alt["logprob"]))
        total = mass["YES"] + mass["NO"]
        return mass["YES"] / total if total > 0 else None
    return None


def yes_probability(text: str, top_logprobs: Sequence[Mapping[str, Any]] | None) -> float | None:
    """The judge's P("YES"): from log-probs when given and usable, else 1 / 0 from the text,
    None when it gave no verdict."""
    if top_logprobs:
        p = logprob_yes(top_logprobs)
        if p is not None:
            return p
    verdict = text_verdict(text)
    return None if verdict is None else float(verdict == "YES")


class PatchJudge:
    """An OpenAI-compatible judge of patch equivalence (see the module docstring).

    `base_url` ends in /v1; `top_logprobs` 0 asks for no log-probs (the verdict is then read
    from the text); `max_tokens` bounds the judge's reply (room for its reasoning).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str | None = None,
        max_tokens: int = 1024,
        top_logprobs: int = 5,
        concurrency: int = 8,
        timeout: float = 600.0,
        template: str = JUDGE_TEMPLATE,
    ) -> None:
        from curation.generate.openai import OpenAIBackend  # verify workers stay import-light

        self.model = model
        self.max_tokens = max_tokens
        self.template = template
        self.backend = OpenAIBackend(
            model,
            base_url=base_url,
            api_key_env=api_key_env,
            concurrency=concurrency,
            timeout=timeout,
            top_logprobs=top_logprobs,
        )

    def judge(self, cases: Sequence[tuple[str, str, str]]) -> list[float | None]:
        """P("YES") per (issue, reference patch, candidate patch); None without a verdict."""
        sampling = SamplingParams(max_new_tokens=self.max_tokens, temperature=0.0, top_p=1.0)
        requests = [
            GenerationRequest(
                key=str(i),
                model=self.model,
                messages=(
                    {
                        "role": "user",
                        "content": self.template.format(
                            issue=issue, reference=reference.rstrip(), candidate=candidate.rstrip()
                        ),
                    },
                ),
                sampling=sampling,
                seed=0,
            )
            for i, (issue, reference, candidate) in enumerate(cases)
        ]
        done = {c.key: c for c in self.backend.generate(requests)}
        return [yes_probability(done[r.key].text, done[r.key].top_logprobs) for r in requests]

    def verify(
        self,
        responses: Sequence[str],
        references: Sequence[str],
        issues: Sequence[str],
        files: Sequence[Mapping[str, str] | None] | None = None,
    ) -> list[Verdict]:
        """A verdict per response: the lexical short cuts, else the judge's P("YES")."""
        shown = files if files is not None else [None] * len(responses)
        out: list[Verdict | None] = []
        asked: dict[tuple[str, str, str], list[int]] = {}
        rows = zip(responses, references, issues, shown, strict=True)
        for i, (response, reference, issue, row_files) in enumerate(rows):
            try:
                candidate = response_patch(response, row_files)
            except EditError as exc:
                out.append(Verdict(False, -1.0, f"unusable SEARCH/REPLACE edits: {exc}"))
                continue
            except ValueError as exc:
                out.append(Verdict(None, 0.0, str(exc), bad_input="files"))
                continue
            lexical = score_patch(candidate, reference)
            if (
                not lexical.decided
                or lexical.score in (-1.0, 1.0)
                or changed_lines(candidate) == []
            ):
                out.append(lexical)
                continue
            out.append(None)
            asked.setdefault((issue, reference, candidate), []).append(i)
        for rows_of, p in zip(asked.values(), self.judge(list(asked)), strict=True):
            verdict = (
                Verdict(None, 0.0, "the judge gave no <judgement>")
                if p is None
                else Verdict(p > 0.5, p, f"judge P(YES) = {p:.3f}")
            )
            for i in rows_of:
                out[i] = verdict
        return out  # type: ignore[return-value]

    def reward(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        patch: Sequence[str],
        problem_statement: Sequence[str],
        context_files: Sequence[Sequence[str] | None] | None = None,
        context_contents: Sequence[Sequence[str] | None] | None = None,
        **_: Any,
    ) -> list[float | None]:
        """TRL-style reward over a swe_rl table's columns: the gold `patch`, the issue
        (`problem_statement`) and the files the prompt showed."""
        files = shown_files(len(completions), context_files, context_contents)
        verdicts = self.verify(
            [completion_text(c) for c in completions], patch, problem_statement, files
        )
        return [v.reward() for v in verdicts]

    def close(self) -> None:
        self.backend.close()


def patch_judge_reward(
    prompts: Sequence[Any], completions: Sequence[Any], *, patch_judge: PatchJudge, **columns: Any
) -> list[float | None]:
    """Reward `swe_patch_judge`: `patch_judge.reward` (the lexical short cuts, else the judge's
    P("YES")) over a swe_rl table's columns."""
    return patch_judge.reward(prompts, completions, **columns)
