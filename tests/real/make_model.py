"""Random weights for a tiny Llama in FOLDER, which already holds the tokenizer's files.

Run by the vLLM environment's python (it has torch and transformers). vLLM's CPU attention
needs a head size of 64; the rest is as small as a real model can be.
"""

import json
import sys
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

folder = Path(sys.argv[1])
tokenizer = json.loads((folder / "tokenizer.json").read_text())
ids = {t["content"]: t["id"] for t in tokenizer["added_tokens"]}
torch.manual_seed(0)
config = LlamaConfig(
    vocab_size=len(tokenizer["model"]["vocab"]) + len(tokenizer["added_tokens"]),
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,
    head_dim=64,
    max_position_embeddings=1024,
    bos_token_id=ids["<|bos|>"],
    eos_token_id=ids["<|eos|>"],
)
LlamaForCausalLM(config).save_pretrained(folder, safe_serialization=True)
