"""SWE data operators: instances, repository snapshots and the Agentless sub-tasks.

Each operator is a plain function `(pl.DataFrame, ...params) -> lake.StepResult` with its
measurements kept as columns:

- `instances`: read SWE-bench-style jsonl (`read_swe_instances`), drop every instance of a
  SWE-bench Verified repository (`drop_verified_repos`), dedup across sources on
  (repo, base commit) (`dedup_repo_commit`).
- `repository`: files of a repository at a commit (git), gold-patch files, edits to diffs.
- `localization`: issue + repository tree -> ranked files; keep recall = 1.0.
- `repair`: `<think>` then `<solution>` with SEARCH/REPLACE blocks, applied to the files and
  scored by patch similarity to the gold patch; the SFT / hard / SWE-Fixer buckets.
- `test_generation`: a self-contained reproduction test, kept when it parses and runs in the
  sandbox without a syntax error.
- `rl_prompts`: SWE RL prompts, GT-only and mixed localization, within a token budget.
"""
