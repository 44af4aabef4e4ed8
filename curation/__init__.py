"""Curation: the operators that turn source rows into training data.

One rule places a module: what it is for.

- An operation every domain uses has a package or module named for it: `ingest`,
  `decontaminate` (with `benchmarks`, the test sets it checks against), `dedup`, `generate`,
  `verify` (the rewards), `difficulty` (pass rates and the filters on them).
- A step only one domain's recipes use lives in that domain's package: `math` (the Math RL
  prompt filters), `code`, `swe`, `science`, `tool_calling`, `instructions` (IF-RL), `general`
  (general-domain SFT conversations), `preferences` (reward-model pairs, RLHF prompts).
- Left at the top: two helpers several packages share (`prompt_ids`, the prompt id hash;
  `sorted_sets`, set operations by sorting) and `cluster_plans`, the registry of the plans
  that run some operators on Ray (`curation/*/on_cluster.py`).

Operators are plain functions over Polars/Arrow tables that return what they keep and what
they drop with a reason (see `lake.steps.StepResult`); the lake they read and write is the
floor below (`lake`).
"""
