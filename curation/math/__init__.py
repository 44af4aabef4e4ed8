"""Math data steps: `filters`, the rule filters of Math RL prompts (multiple choice, proofs,
multi-part questions, figure references, non-English text, missing or unparseable answers).
The math answer reward is `curation.verify.math`."""
