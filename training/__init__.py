"""The compact trainer: a cascade of SFT, reward-model, GRPO and MOPD stages from a manifest.

runner (the cascade, hash checks once) -> sft (packed SFT) | reward_model (Bradley-Terry RM,
held-out pairwise accuracy) | grpo (the on-policy RL loop); packing, datasets,
sft_data, pair_data (preference pairs, split by prompt_id), rl_data (prompt order, epoch
filtering), episode (the rollout -> update contract), policy_loss, rewards (from
curation.verify, and reward models local or served), reward_server (`cascade serve-reward`),
rollout/ (hf and vllm engines), distributed, checkpoint, step_log, stage, models. Chats are
rendered by `schemas.chat_template`, the one place teachers and the policy share.
"""
