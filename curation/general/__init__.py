"""General-domain SFT steps: `conversations` (parallel thinking / non-thinking replies,
multi-turn synthesis, chats as rows) and `ground_truth` (teacher replies that disagree with a
verifiable reference answer are dropped)."""
