"""How often our IFBench checkers agree with IFBench's published verdicts, strict and loose.

IFBench's repository publishes sample responses with the verdicts of its own checkers
(`eval/eval_results_strict.jsonl`, `eval/eval_results_loose.jsonl`) beside the benchmark
(`data/IFBench_test.jsonl`, which holds the kwargs). This script decides every (response,
instruction) of those files with `curation.verify.ifeval.check_instruction` and prints the
agreement per instruction id, with each disagreement's response opening:

    PYTHONPATH=. python bench/ifbench_agreement.py --ifbench <IFBench checkout> [--json out.json]

Nothing of IFBench's is bundled here; point `--ifbench` at a checkout (or its three files).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from curation.verify.ifeval import check_instruction


@dataclass
class IdAgreement:
    """One instruction id's counts: cases, agreements per mode, their pass counts, and the
    disagreements (mode, key, theirs, ours, response opening)."""

    cases: int = 0
    agree: dict[str, int] = field(default_factory=lambda: {"strict": 0, "loose": 0})
    theirs_pass: dict[str, int] = field(default_factory=lambda: {"strict": 0, "loose": 0})
    ours_pass: dict[str, int] = field(default_factory=lambda: {"strict": 0, "loose": 0})
    differ: list[tuple[str, str, bool, bool, str]] = field(default_factory=list)


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def ifbench_files(root: Path) -> tuple[Path, Path, Path]:
    """(test, strict verdicts, loose verdicts) of an IFBench checkout."""
    return (
        root / "data" / "IFBench_test.jsonl",
        root / "eval" / "eval_results_strict.jsonl",
        root / "eval" / "eval_results_loose.jsonl",
    )


def agreement(test: Path, strict: Path, loose: Path) -> dict[str, IdAgreement]:
    """Per instruction id, how our strict and loose verdicts compare with IFBench's."""
    kwargs_of = {}
    for item in _jsonl(test):
        kwargs_of[item["prompt"].strip()] = (
            item["key"],
            item["instruction_id_list"],
            item["kwargs"],
        )
    results: dict[str, IdAgreement] = defaultdict(IdAgreement)
    unmatched = {"strict": 0, "loose": 0}
    verdicts = {"strict": _jsonl(strict), "loose": _jsonl(loose)}
    for mode, rows in verdicts.items():
        for row in rows:
            if row["prompt"].strip() not in kwargs_of:
                unmatched[mode] += 1  # a verdict for a prompt the test file words otherwise
                continue
            key, ids, kwargs = kwargs_of[row["prompt"].strip()]
            if ids != row["instruction_id_list"]:
                raise ValueError(f"{test}: item {key} lists other ids than the verdicts")
            for instruction, args, theirs in zip(
                ids, kwargs, row["follow_instruction_list"], strict=True
            ):
                ours = check_instruction(instruction, args, row["response"], loose=mode == "loose")
                entry = results[instruction]
                entry.cases += mode == "strict"
                entry.agree[mode] += ours == theirs
                entry.theirs_pass[mode] += theirs
                entry.ours_pass[mode] += ours
                if ours != theirs:
                    opening = row["response"][:90].replace("\n", "\\n")
                    entry.differ.append((mode, key, theirs, ours, opening))
    if unmatched["strict"]:
        print(f"{unmatched['strict']} verdict rows name a prompt {test} does not hold; skipped")
    return dict(sorted(results.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ifbench", type=Path, help="an IFBench checkout")
    parser.add_argument("--test", type=Path)
    parser.add_argument("--strict", type=Path)
    parser.add_argument("--loose", type=Path)
    parser.add_argument("--json", type=Path, help="write the per-id figures here")
    args = parser.parse_args()
    test, strict, loose = ifbench_files(args.ifbench) if args.ifbench else (None, None, None)
    test, strict, loose = args.test or test, args.strict or strict, args.loose or loose
    if not (test and strict and loose):
        parser.error("give --ifbench DIR, or --test, --strict and --loose")
    results = agreement(test, strict, loose)
    totals = {m: sum(r.agree[m] for r in results.values()) for m in ("strict", "loose")}
    cases = sum(r.cases for r in results.values())
    print(f"{'instruction id':36} {'n':>3}  strict agree (theirs/ours pass)  loose agree")
    for instruction, r in results.items():
        s, lo = r.agree["strict"], r.agree["loose"]
        print(
            f"{instruction:36} {r.cases:3}  {s:3}/{r.cases:<3} ({r.theirs_pass['strict']}/"
            f"{r.ours_pass['strict']})            {lo:3}/{r.cases:<3} ({r.theirs_pass['loose']}/"
            f"{r.ours_pass['loose']})"
        )
    for m in ("strict", "loose"):
        print(f"{m}: {totals[m]}/{cases} = {totals[m] / cases:.1%} of instruction verdicts agree")
    print("\ndisagreements (mode, item, theirs, ours, response opening):")
    for instruction, r in results.items():
        for mode, key, theirs, ours, opening in r.differ:
            print(f"  {instruction} {mode} item {key}: theirs={theirs} ours={ours}  {opening}")
    if args.json:
        payload = {
            i: {"cases": r.cases, "agree": r.agree, "theirs_pass": r.theirs_pass,
                "ours_pass": r.ours_pass}
            for i, r in results.items()
        }  # fmt: skip
        args.json.write_text(json.dumps(payload, indent=1) + "\n")


if __name__ == "__main__":
    main()
