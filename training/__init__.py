"""The compact trainer: a cascade of SFT, GRPO and MOPD stages from a training manifest.

runner (the cascade, hash checks once) -> sft (packed SFT) | grpo (the on-policy RL loop);
chat_template, packing, datasets, sft_data, rl_data (prompt order, epoch filtering), episode
(the rollout -> update contract), policy_loss, rewards (from curation.verify), rollout/ (hf
and vllm engines), distributed, checkpoint, step_log, stage, models.
"""
