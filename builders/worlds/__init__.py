"""Stand-ins for the world no recipe can reach from our machines, written by code: the demo
corpus (`demo_corpus`, the `demo` profile's planted cases) and the toy world (`toy_world`,
`toy_domains`, `toy_tools`: prompts our verifiers check; `toy_profile`: the tiny teachers and
sources of the `toy` profiles; `toy_judge`: SWE RL's patch judge; `toy_cascade`: every dataset
of `manifests/toy_cascade.json`, built by the recipes).

These are fixtures, not recipes: the recipes in `builders/` name them only in their `demo` and
`toy` profiles.
"""
