"""Tool-calling SFT steps (`sft`): conversations read and measured, then regenerated turn by
turn by a teacher."""
