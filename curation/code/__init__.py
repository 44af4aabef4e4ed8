"""Code-data operators: behaviour dedup, syntax dedup, problem-id decontamination, the
release-date cutoff and correctness filtering of teacher traces.

Each operator is a plain function `(pl.DataFrame, ...params) -> lake.StepResult`, with its
measurements kept as columns so thresholds can be re-tuned in SQL:

- `io_cases`: a problem's tests as normalized I/O cases (any test shape we read).
- `behaviour_dedup`: `dedup_by_behaviour` (same tests = one cluster, joined with n-gram text
  similarity) and `decontaminate_by_behaviour` (training problems whose tests match a
  benchmark item's).
- `syntax_dedup`: `dedup_by_syntax`, renamed copies of a program (tree-sitter, Python, C++,
  Java).
- `problem_ids`: `decontaminate_by_problem_id`, original problem URL / contest id matching.
- `release_cutoff`: `drop_after_cutoff`, the competitive-coding release-date rule.
- `correctness`: `filter_by_correctness`, traces whose code passes the problem's tests; the
  longer traces for problems without tests.
- `checkable`: `filter_checkable_by_tests`, the Code RL prompt filter (problems a
  test-running reward can check).
- `benchmark_tests`: `load_code_benchmarks`, code benchmark items with their tests, for
  behaviour decontamination.
- `fields`: `lift_fields`, a field lifted from the JSON `metadata` column into a column.

Teacher responses per row (`sample_responses`) come from `curation.generate.samples`.
"""
