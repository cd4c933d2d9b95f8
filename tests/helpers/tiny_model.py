"""A tiny random-init Llama with a byte-level BPE trained here: a real model directory in seconds.

Sizes are chosen so the real paths accept it: every linear width is a multiple of 128 (W4A16 group
size), heads divide the width, and " A".." D" are single tokens (letter-choice scoring).
"""

from __future__ import annotations

from pathlib import Path

TRAIN_TEXT = [
    "대한민국은 민주공화국이다. 대한민국의 주권은 국민에게 있고, 모든 권력은 국민으로부터 나온다.",
    "모든 국민은 법 앞에 평등하다. 누구든지 성별·종교 또는 사회적 신분에 의하여 차별을 받지 아니한다.",
    "정답： A 정답： B 정답： C 정답： D 다음 중 옳은 것은? 법률 경제 역사 과학 수학",
    "The following are multiple choice questions (with answers) about science.",
    "Question: What is the capital of France? A. Paris B. Rome C. Berlin D. Madrid Answer: A",
    "Answer: A Answer: B Answer: C Answer: D The answer is B. The answer is C.",
    "Debian is a free operating system. 데비안은 자유 운영체제입니다. 패키지 관리자는 apt 입니다.",
]


def build_tiny_model(out: Path, arch: str = "llama", seed: int = 0) -> Path:
    """Write config, safetensors weights (bf16) and a fast tokenizer for a ~3 MB model into `out`."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1024,
        special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(TRAIN_TEXT * 50, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", add_bos_token=True
    )
    for letter in "ABCD":
        assert len(fast.encode(f" {letter}", add_special_tokens=False)) == 1, letter
    fast.save_pretrained(out)

    model_type = {"llama": "llama", "qwen2": "qwen2"}[arch]
    config = AutoConfig.for_model(
        model_type,
        vocab_size=1024,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=2,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    return out
