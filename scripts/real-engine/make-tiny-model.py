#!/usr/bin/env python3
"""Why this exists: the integration tests need a model for llama-server that is made
here, offline, in about a minute, and a Hugging Face tokenizer that counts tokens the way
the server does. This writes a tiny llama-architecture GGUF with random weights (the text
is gibberish; the decode loop, batching and streaming are real) and the matching
tokenizer files.

    python make-tiny-model.py --out DIR      (needs the packages in requirements.txt)

DIR/tiny-llama.gguf   the model, served as `llama-server -m DIR/tiny-llama.gguf`
DIR/hf/               tokenizer.json, tokenizer_config.json (with the chat template),
                      special_tokens_map.json and config.json (the model's shape):
                      a model folder for `cadence --tokenizer DIR/hf`

The tokenizer is a byte-level BPE (GPT-2 style) trained here on the sources of the
running Python's standard library; the GGUF carries the same vocabulary and merges
(tokenizer.ggml.model = gpt2), so the client and the server count the same tokens.
The default shape (vocab 4096, hidden 512, 8 layers, 8 heads, ff 1536, f16) is the one
tests/engines/tiny-llama-cpu.toml describes: change both together.
"""
import argparse
import glob
import json
import os

import gguf
import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

BOS_EOS = "<|endoftext|>"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
SPECIALS = [BOS_EOS, IM_START, IM_END]
# ChatML, so /v1/chat/completions works; the same text goes into both formats.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def parse_args():
    p = argparse.ArgumentParser(description="a tiny random-weight llama GGUF and its tokenizer")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--name", default="tiny-llama", help="the GGUF's file name, without .gguf")
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--embd", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--ff", type=int, default=1536)
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--dtype", choices=["f16", "f32"], default="f16")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if a.embd % a.heads or a.heads % a.kv_heads:
        p.error("--embd must divide by --heads, and --heads by --kv-heads")
    return a


def stdlib_text(limit=20_000_000, files=400):
    """The tokenizer's training text: the running Python's own standard-library sources."""
    root = os.path.dirname(os.__file__)
    paths = sorted(glob.glob(os.path.join(root, "*.py")))[:files]
    if not paths:
        raise SystemExit(f"make-tiny-model: no Python sources under {root} to train on")
    seen = 0
    for path in paths:
        with open(path, encoding="utf-8", errors="ignore") as f:
            text = f.read()
        seen += len(text)
        yield text
        if seen > limit:
            return


def write_json(path, value):
    with open(path, "w") as f:
        json.dump(value, f, indent=1)


def train_tokenizer(a, hf):
    """Trains the BPE, saves it as hf/tokenizer.json, returns (tokens by id, merges)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=a.vocab,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(stdlib_text(), trainer=trainer)
    path = os.path.join(hf, "tokenizer.json")
    tok.save(path)
    with open(path) as f:
        saved = json.load(f)
    by_id = {i: t for t, i in saved["model"]["vocab"].items()}
    for added in saved.get("added_tokens", []):
        by_id[added["id"]] = added["content"]
    tokens = [by_id[i] for i in range(max(by_id) + 1)]  # ids are dense from 0
    merges = [m if isinstance(m, str) else " ".join(m) for m in saved["model"]["merges"]]
    return tokens, merges


def write_hf_files(a, hf, n_vocab, ids):
    write_json(os.path.join(hf, "tokenizer_config.json"), {
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": a.ctx,
        "bos_token": BOS_EOS, "eos_token": BOS_EOS, "unk_token": None, "pad_token": BOS_EOS,
        "add_bos_token": False, "add_eos_token": False,
        "clean_up_tokenization_spaces": False, "chat_template": CHAT_TEMPLATE,
    })
    write_json(os.path.join(hf, "special_tokens_map.json"),
               {"bos_token": BOS_EOS, "eos_token": BOS_EOS, "pad_token": BOS_EOS})
    write_json(os.path.join(hf, "config.json"), {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": n_vocab, "hidden_size": a.embd, "intermediate_size": a.ff,
        "num_hidden_layers": a.layers, "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads, "max_position_embeddings": a.ctx,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
        "bos_token_id": ids[BOS_EOS], "eos_token_id": ids[BOS_EOS],
        "torch_dtype": "float16" if a.dtype == "f16" else "float32",
    })


def write_gguf(a, path, tokens, merges, ids):
    rng = np.random.default_rng(a.seed)
    dtype = np.float16 if a.dtype == "f16" else np.float32

    def weights(rows, cols, std=0.02):
        return (rng.standard_normal((rows, cols), dtype=np.float32) * std).astype(dtype)

    def ones(n):  # norms stay f32, as llama.cpp's converters write them
        return np.ones(n, dtype=np.float32)

    head_dim = a.embd // a.heads
    kv = a.kv_heads * head_dim
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("tiny-random-llama")
    w.add_context_length(a.ctx)
    w.add_embedding_length(a.embd)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(a.ff)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(len(tokens))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if a.dtype == "f16" else gguf.LlamaFileType.ALL_F32)

    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if t in SPECIALS else gguf.TokenType.NORMAL
                       for t in tokens])
    w.add_token_merges(merges)
    w.add_bos_token_id(ids[BOS_EOS])
    w.add_eos_token_id(ids[BOS_EOS])
    w.add_eot_token_id(ids[IM_END])
    w.add_pad_token_id(ids[BOS_EOS])
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)

    # The same tensors, in the same order and from the same seed, as earlier versions of
    # this kit: a given --seed always gives the same weights.
    w.add_tensor("token_embd.weight", weights(len(tokens), a.embd, std=1.0))
    for i in range(a.layers):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", ones(a.embd))
        w.add_tensor(b + "attn_q.weight", weights(a.embd, a.embd))
        w.add_tensor(b + "attn_k.weight", weights(kv, a.embd))
        w.add_tensor(b + "attn_v.weight", weights(kv, a.embd))
        w.add_tensor(b + "attn_output.weight", weights(a.embd, a.embd))
        w.add_tensor(b + "ffn_norm.weight", ones(a.embd))
        w.add_tensor(b + "ffn_gate.weight", weights(a.ff, a.embd))
        w.add_tensor(b + "ffn_up.weight", weights(a.ff, a.embd))
        w.add_tensor(b + "ffn_down.weight", weights(a.embd, a.ff))
    w.add_tensor("output_norm.weight", ones(a.embd))
    w.add_tensor("output.weight", weights(len(tokens), a.embd, std=0.05))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return a.embd * len(tokens) * 2 + a.layers * (2 * a.embd * a.embd + 2 * kv * a.embd
                                                  + 3 * a.ff * a.embd)


def main():
    a = parse_args()
    hf = os.path.join(a.out, "hf")
    os.makedirs(hf, exist_ok=True)
    tokens, merges = train_tokenizer(a, hf)
    missing = [t for t in SPECIALS if t not in tokens]
    if missing:
        raise SystemExit(f"make-tiny-model: the trained vocabulary lacks {missing}")
    ids = {t: tokens.index(t) for t in SPECIALS}
    print(f"make-tiny-model: tokenizer of {len(tokens)} tokens, {len(merges)} merges, "
          f"special ids {ids}")
    write_hf_files(a, hf, len(tokens), ids)
    path = os.path.join(a.out, a.name + ".gguf")
    params = write_gguf(a, path, tokens, merges, ids)
    print(f"make-tiny-model: wrote {path} ({os.path.getsize(path) / 1e6:.1f} MB, "
          f"{params / 1e6:.1f}M parameters)")


if __name__ == "__main__":
    main()
