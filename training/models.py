"""Build or load the model and tokenizer a manifest names.

`tiny-random:<arch>` builds a random-init model from a transformers config (seeded, shaped by
`model_overrides`); `in-process-bpe:<vocab>` trains a byte-level BPE on given texts. Both exist
so tests and the CPU demo run with no download. Anything else goes to `from_pretrained`
(a local directory or a hub id already in the local cache).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

from schemas.chat_template import CHAT_TEMPLATE, IM_END, IM_START, PAD, SPECIAL_TOKENS
from training.checkpoint import TRAINED_ON

TINY_DEFAULTS: dict[str, int | float | str | bool] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
}


def train_bpe_tokenizer(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on `texts`, with the ChatML/think tokens as single tokens.

    It splits text as Qwen2's tokenizer does (NFC, then Qwen2's pattern: digits one at a
    time), because that is what `AutoTokenizer` rebuilds from the vocabulary when it loads a
    saved qwen2 model directory: any other split would tokenize the next stage's, the rollout
    engine's and every generator's text differently from the text the model was trained on.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    trained = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        eos_token=IM_END,
        additional_special_tokens=[t for t in SPECIAL_TOKENS if t not in (PAD, IM_END)],
    )
    trained.chat_template = CHAT_TEMPLATE
    return trained


def load_tokenizer(spec: str, texts: Iterable[str] | None = None) -> PreTrainedTokenizerFast:
    """`in-process-bpe:<vocab>` (needs `texts`) or a local path / cached hub id.

    The tokenizer always carries the trainer's own chat template (`CHAT_TEMPLATE`), replacing
    the one it came with: the model is trained on that rendering, so it is the one saved next
    to the weights for generation.
    """
    if spec.startswith("in-process-bpe:"):
        if texts is None:
            raise ValueError("in-process-bpe tokenizer needs training texts")
        return train_bpe_tokenizer(texts, int(spec.split(":", 1)[1]))
    tok = AutoTokenizer.from_pretrained(spec)
    check_loads_as_saved(spec, tok)
    missing = [t for t in (IM_START, IM_END) if t not in tok.get_vocab()]
    if missing:
        raise ValueError(f"tokenizer {spec!r} lacks the ChatML tokens {missing}")
    if tok.pad_token is None:
        tok.pad_token = PAD if PAD in tok.get_vocab() else IM_END
    tok.chat_template = CHAT_TEMPLATE
    return tok


SPLIT_PROBE = "What is 63 + 48?\n<think>\n3+8=11\n</think>\n\\boxed{111} Été, naïve  x=[1,2]"
"""Digits, spacing, accents and markup: where tokenizer pipelines differ, they differ here."""


def check_loads_as_saved(path: str, tok: PreTrainedTokenizerFast) -> None:
    """Refuse a model directory of ours whose tokenizer loads differently from how it was saved.

    `AutoTokenizer` may rebuild a tokenizer's pipeline from its model type instead of reading
    `tokenizer.json` (transformers 5 does for qwen2); a model trained on one split and fed
    the other sees text it never saw. Checked only for directories our trainer wrote
    (`trained_on.json`), whose `tokenizer.json` is the pipeline the model was trained with.
    """
    saved = Path(path) / "tokenizer.json"
    if not (Path(path) / TRAINED_ON).is_file() or not saved.is_file():
        return
    from tokenizers import Tokenizer

    exact = Tokenizer.from_file(str(saved)).encode(SPLIT_PROBE, add_special_tokens=False).ids
    loaded = tok(SPLIT_PROBE, add_special_tokens=False)["input_ids"]
    if loaded != exact:
        raise ValueError(
            f"{path}: AutoTokenizer loads its tokenizer as {type(tok).__name__}, which splits "
            f"text differently from the tokenizer.json the model was trained with "
            f"({len(loaded)} vs {len(exact)} tokens for {SPLIT_PROBE[:16]!r}...); this "
            "model was trained before the trainer's tokenizer split text as Qwen2's does: "
            "train it again"
        )


def build_model(
    base_model: str,
    overrides: dict[str, int | float | str | bool] | None,
    vocab_size: int,
    attn_implementation: str,
    seed: int,
) -> torch.nn.Module:
    """Random-init `tiny-random:<arch>` (seeded) or `from_pretrained(base_model)`."""
    if base_model.startswith("tiny-random:"):
        arch = base_model.split(":", 1)[1]
        config = AutoConfig.for_model(arch, **{**TINY_DEFAULTS, **(overrides or {})})
        config.vocab_size = vocab_size
        config._attn_implementation = attn_implementation
        torch.manual_seed(seed)
        return AutoModelForCausalLM.from_config(config, attn_implementation=attn_implementation)
    return AutoModelForCausalLM.from_pretrained(
        base_model, attn_implementation=attn_implementation, dtype=torch.float32
    )


def pick_attn_implementation(requested: str, on_gpu: bool) -> str:
    """`auto`: on GPU flash_attention_2 when flash-attn is installed, else PyTorch's
    flex_attention (transformers turns packed position ids into a document mask, so packed
    rows keep fast block-sparse kernels instead of SDPA's dense block-diagonal mask); on CPU
    SDPA (flex_attention's CPU kernels are compiled per shape and fail on some shapes)."""
    if requested != "auto":
        return requested
    if not on_gpu:
        return "sdpa"
    try:
        import flash_attn  # noqa: F401

        return "flash_attention_2"
    except ImportError:
        return "flex_attention"


def is_local_model(path: str | Path) -> bool:
    """True when `path` is a directory holding a saved transformers model."""
    return (Path(path) / "config.json").is_file()
