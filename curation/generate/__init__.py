"""Teacher generation: one backend interface (hf, vllm, openai), cached into the lake.

`generate_to_lake` plans one job per (prompt, mode, sample), skips the ones whose fingerprint
is already in the output table, and commits the rest in small chunks; responses are split
into reasoning and final answer (`split_response`). Heavy libraries (torch, vllm) are only
imported by the backend that needs them.
"""

from curation.generate.backend import BACKENDS, Backend, BackendError
from curation.generate.backends import make_backend
from curation.generate.plan import Job, Teacher, fingerprint, plan_jobs, prompts_from_records
from curation.generate.run import GenerationReport, generate_to_lake
from curation.generate.split import SplitResponse, split_response
from schemas.generation import Completion, GenerationRequest, SamplingParams

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendError",
    "Completion",
    "GenerationReport",
    "GenerationRequest",
    "Job",
    "SamplingParams",
    "SplitResponse",
    "Teacher",
    "fingerprint",
    "generate_to_lake",
    "make_backend",
    "plan_jobs",
    "prompts_from_records",
    "split_response",
]
