"""Science SFT steps (`sft`): prompts given as chats, several responses for selected prompts,
and the multiple-choice responses that walk through each option instead of solving."""
