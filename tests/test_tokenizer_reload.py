"""A model directory the trainer writes tokenizes text after a reload exactly as in training.

transformers 5's AutoTokenizer rebuilds a qwen2 directory's tokenizer from its vocabulary
with Qwen2's own split (digits one at a time): a BPE that split differently was trained on
`Ġ63` and then, from the next stage on, fed `Ġ`, `6`, `3`. The toy policy's arithmetic never
generalised because of it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from training.checkpoint import TRAINED_ON
from training.models import SPLIT_PROBE, build_model, load_tokenizer, train_bpe_tokenizer

TEXTS = [f"What is {a} + {b}?\n{a + b} Été naïve x=[{a},{b}]" for a in range(40) for b in (7, 63)]


def save_model_dir(tokenizer, out: Path) -> Path:
    model = build_model("tiny-random:qwen2", None, len(tokenizer), "sdpa", seed=0)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / TRAINED_ON).write_text(json.dumps({"manifest": {}}))
    return out


def test_a_saved_qwen2_directory_reloads_with_the_split_it_was_trained_with(tmp_path) -> None:
    trained = train_bpe_tokenizer(TEXTS, 400)
    out = save_model_dir(trained, tmp_path / "final")
    reloaded = AutoTokenizer.from_pretrained(out)
    for text in [SPLIT_PROBE, *TEXTS[:20]]:
        assert reloaded(text)["input_ids"] == trained(text)["input_ids"], text
    # digits are single tokens, as in Qwen's own tokenizers
    assert "Ġ63" not in trained.get_vocab()
    assert (
        load_tokenizer(str(out))("What is 63?")["input_ids"] == trained("What is 63?")["input_ids"]
    )


def test_a_directory_whose_tokenizer_reloads_differently_is_refused(tmp_path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    # the split the trainer used before: GPT-2's pattern, digits in runs
    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    raw.train_from_iterator(TEXTS, trainer=trainer)
    old = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|im_end|>")
    out = save_model_dir(old, tmp_path / "final")
    if (
        AutoTokenizer.from_pretrained(out)(SPLIT_PROBE)["input_ids"]
        == old(SPLIT_PROBE)["input_ids"]
    ):
        pytest.skip("this transformers reads tokenizer.json as saved: nothing to refuse")
    with pytest.raises(ValueError, match="splits text differently .* train it again"):
        load_tokenizer(str(out))
