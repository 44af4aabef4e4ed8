"""Which operators have a cluster plan: `CLUSTER_PLANS` maps an operator to the plan
`lake.cluster.RayExecutor` runs for it (`RayExecutor(plans=CLUSTER_PLANS)`).

An operator without a plan runs on the cluster as a batch map when its step is row-local,
else on the driver. The plans live next to their operators (`curation/*/on_cluster.py`);
this registry is the only module that imports them, and none of them imports Ray before a
cluster is used, so `import curation.dedup` stays free of Ray.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from curation.decontaminate import decontaminate
from curation.decontaminate.on_cluster import decontaminate_on_cluster
from curation.dedup import exact_dedup, near_dedup
from curation.dedup.on_cluster import exact_dedup_on_cluster, near_dedup_on_cluster
from curation.difficulty import majority_answer_check, measure_pass_rates
from curation.generate.on_cluster import sampling_on_cluster
from curation.generate.samples import sample_responses
from lake.cluster import TablePlan
from lake.steps import StepResult

CLUSTER_PLANS: Mapping[Callable[..., StepResult], TablePlan] = {
    exact_dedup: exact_dedup_on_cluster,
    near_dedup: near_dedup_on_cluster,
    decontaminate: decontaminate_on_cluster,
    sample_responses: sampling_on_cluster,
    majority_answer_check: sampling_on_cluster,
    measure_pass_rates: sampling_on_cluster,
}
