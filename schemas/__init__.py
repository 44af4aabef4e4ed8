"""Contracts only: Arrow schemas of lake tables, pydantic models of manifests, the values
that cross the generation interface (`schemas.generation`) and the environment interface of
agentic episodes (`schemas.environment`), and the two rules the teachers and
the trainer must share exactly: the chat format (`schemas.chat_template`) and seeded sampling
(`schemas.sampling`).

Nothing here does I/O or imports anything heavier than pyarrow and pydantic at import time
(`schemas.sampling` takes torch only when one of its tensor functions runs).

Names the tables share, one meaning each:

- `uid`: which row it is. A row's name, unique in a table version and stable across versions
  (`<file stem>:<line>` for ingested prompts, `<prompt uid>/<mode>/<sample index>` for sampled
  responses, a hash of source and instance id for SWE instances); drops, dedup clusters and
  fan-out steps name rows by it (`id_column="uid"`), and a row made from another names it
  by its `prompt_uid`.
- `id`: what the row is, a content hash. Of a prompt, its normalized text (the prompt id,
  `curation.prompt_ids`: exact duplicates share one); of a generation, its fingerprint.
- `prompt_id` (generations, difficulty, preference pairs): the prompt a row belongs to, by
  that prompt's `id`; rows without an `id` (SWE instances) are sampled under their `uid`
  (`id_column="uid"`), so SWE generations hold a uid there. A pair's `prompt_id` is the hash
  of its normalized context.
- fingerprint: the generation cache key alone, the hash of everything that determines a
  sample (model, messages, mode, mode switch, sampling, seed): a generation's `id`. A code
  problem's normalized tests are its I/O cases (`curation.code.io_cases`); what a training
  checkpoint was trained on is its data identity (`data_identity`). One column keeps the old
  word, since renaming it would change built tables: `syntax_fingerprint`, a hash of a
  program's normalized tokens (`curation.code.syntax_dedup`).
"""
