"""The compact trainer: chat template, packing, SFT, GRPO and the cascade runner."""
