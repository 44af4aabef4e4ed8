"""Build a tiny random-init teacher (model + trained tokenizer + chat template) on disk.

Tests, the demo and the CPU benchmark need a real transformers model that loads with
`from_pretrained`, renders prompts with its own chat template and knows `<think>`, without
downloading anything. The tokenizer is a byte-level BPE trained in-process on a corpus the
caller provides; the model is a Qwen3 architecture with random weights. Its text is
gibberish, but every code path (template, batching, seeds, end tokens, splitting) is real.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

IM_START, IM_END, END_OF_TEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"

# ChatML as Qwen3 renders it: `enable_thinking=False` pre-fills an empty think block.
QWEN3_STYLE_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}"
    "<think>\n\n</think>\n\n"
    "{% endif %}"
    "{% endif %}"
)

# DeepSeek-R1-0528 style: the generation prompt already opens the reasoning.
R1_STYLE_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)


def build_tiny_teacher(
    out_dir: str | Path,
    corpus: Iterable[str],
    *,
    template: Literal["qwen3", "r1"] = "qwen3",
    train_on: Sequence[tuple[str, str]] = (),
    train_steps: int = 150,
    vocab_size: int = 512,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int | None = None,
    intermediate_size: int | None = None,
    initializer_range: float = 0.3,
    seed: int = 0,
) -> Path:
    """Write a loadable tiny teacher to `out_dir` and return the path.

    With `train_on` (prompt, answer) pairs the model is trained for `train_steps` steps on
    chats in its own template, half thinking (`<think>` reasoning, then the boxed answer) and
    half non-thinking, so it learns the shape of a teacher response: it opens and closes
    `<think>`, answers and ends with `<|im_end|>`, in a few hundred CPU milliseconds per
    step batch. Without it the weights stay random; `initializer_range` is well above the
    usual 0.02 so the output still depends on the prompt.
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=[END_OF_TEXT, IM_START, IM_END],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        additional_special_tokens=[IM_START],
    )
    tokenizer.add_tokens(["<think>", "</think>"])  # ordinary added tokens, kept on decode
    tokenizer.chat_template = QWEN3_STYLE_TEMPLATE if template == "qwen3" else R1_STYLE_TEMPLATE

    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads or num_heads,
        head_dim=hidden_size // num_heads,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        initializer_range=initializer_range,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    if train_on:
        _teach_response_shape(model, tokenizer, train_on, train_steps, template)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    tokenizer.save_pretrained(out)
    model.save_pretrained(out)
    return out


def _teach_response_shape(
    model: Any, tokenizer: Any, pairs: Sequence[tuple[str, str]], steps: int, template: str
) -> None:
    """A few AdamW steps on rendered chats (loss on the assistant turn only)."""
    import torch

    examples = []
    for index, (prompt, answer) in enumerate(pairs):
        thinking = template == "r1" or index % 2 == 0
        chat = [{"role": "user", "content": prompt[:120]}]
        head = tokenizer.apply_chat_template(
            chat, tokenize=False, add_generation_prompt=True, enable_thinking=thinking
        )
        reply = f"\\boxed{{{answer}}}{IM_END}"
        if thinking:
            reasoning = f"The answer is {answer}.\n</think>\n\n"
            reply = reasoning + reply if template == "r1" else f"<think>\n{reasoning}{reply}"
        head_ids = tokenizer(head, add_special_tokens=False)["input_ids"]
        reply_ids = tokenizer(reply, add_special_tokens=False)["input_ids"]
        ids = (head_ids + reply_ids)[-160:]
        labels = ([-100] * len(head_ids) + reply_ids)[-160:]
        examples.append((ids, labels))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(steps):
        picks = torch.randint(len(examples), (8,), generator=generator).tolist()
        width = max(len(examples[i][0]) for i in picks)
        ids = torch.full((len(picks), width), tokenizer.pad_token_id)
        labels = torch.full((len(picks), width), -100)
        mask = torch.zeros((len(picks), width), dtype=torch.long)
        for row, i in enumerate(picks):
            seq, lab = examples[i]
            ids[row, : len(seq)] = torch.tensor(seq)
            labels[row, : len(lab)] = torch.tensor(lab)
            mask[row, : len(seq)] = 1
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
