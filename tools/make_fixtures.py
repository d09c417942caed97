#!/usr/bin/env python3
"""Make the small Hugging Face checkpoints MiniInfer's tests compare against.

Each fixture is a model directory exactly as Hugging Face writes it (config.json,
generation_config.json, *.safetensors in bf16) plus Hugging Face's own outputs on it:

  reference.safetensors  logits.<p>  [num_positions, vocab] f32, prompt p
  reference.json         per prompt: ids, which positions' logits are stored, the greedy
                         continuation (32 tokens, EOS ignored) and its smallest top-1/top-2 gap;
                         the rotary's inv_freq and attention scaling

The reference runs in float32 on the bf16 weights, reloaded from disk with transformers'
own loader (so the checkpoint's tensor names and layout are the hub's).

Needs torch and transformers (e.g. the H200 machine). Usage:
  python3 tools/make_fixtures.py --out tests/fixtures [--tokenizer DIR]
"""
import argparse
import json
import os
import shutil

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, Qwen2Config, Qwen3Config, Qwen3MoeConfig

GREEDY_TOKENS = 32

FIXTURES = {
    # Qwen2: q/k/v biases, GQA 4:1, head_dim 64 = hidden / heads, sharded checkpoint.
    "qwen2-tiny": dict(
        cls=Qwen2Config, vocab_size=512, hidden_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, intermediate_size=512,
        tie_word_embeddings=False, rope_theta=1000000.0, max_position_embeddings=4096,
        rms_norm_eps=1e-6, shard="150KB"),
    # Qwen3: per-head q/k RMSNorm, head_dim 64 set apart from hidden / heads, GQA 4:1.
    "qwen3-tiny": dict(
        cls=Qwen3Config, vocab_size=512, hidden_size=128, num_hidden_layers=3,
        num_attention_heads=8, num_key_value_heads=2, head_dim=64, intermediate_size=384,
        tie_word_embeddings=False, rope_theta=1000000.0, max_position_embeddings=4096,
        rms_norm_eps=1e-6),
    # Qwen3-MoE: 8 experts, top-2, renormalised, layer 1 dense (mlp_only_layers), tied head,
    # head_dim 128, GQA 2:1.
    "qwen3-moe-tiny": dict(
        cls=Qwen3MoeConfig, vocab_size=512, hidden_size=128, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=128, intermediate_size=256,
        moe_intermediate_size=64, num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
        decoder_sparse_step=1, mlp_only_layers=[1], tie_word_embeddings=True,
        rope_theta=1000000.0, max_position_embeddings=4096, rms_norm_eps=1e-6),
    # The bundled demo: Qwen3 with the real 151,936-token vocabulary and tokenizer, tied head.
    "qwen3-demo": dict(
        cls=Qwen3Config, vocab_size=151936, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, intermediate_size=96,
        tie_word_embeddings=True, rope_theta=1000000.0, max_position_embeddings=40960,
        rms_norm_eps=1e-6, bos_token_id=151643, eos_token_id=151645, demo=True),
    # A second MoE shape: 16 experts, top-4 without renormalisation, layer 0 dense
    # (mlp_only_layers), head_dim 64, GQA 4:1, untied head. Last in the table: the fixtures
    # above keep their seeds.
    "qwen3-moe-wide": dict(
        cls=Qwen3MoeConfig, vocab_size=512, hidden_size=128, num_hidden_layers=3,
        num_attention_heads=8, num_key_value_heads=2, head_dim=64, intermediate_size=256,
        moe_intermediate_size=96, num_experts=16, num_experts_per_tok=4, norm_topk_prob=False,
        decoder_sparse_step=1, mlp_only_layers=[0], tie_word_embeddings=False,
        rope_theta=1000000.0, max_position_embeddings=4096, rms_norm_eps=1e-6),
    # Qwen3 with YaRN rope scaling, as Qwen3's model cards document it (factor 4) but over an
    # original context of 32 positions, so that the 37-token prompt and every greedy
    # continuation run past it. config.json is rewritten to the cards' 4.x spelling
    # (rope_theta + rope_scaling) before the reference model is loaded from it.
    "qwen3-yarn": dict(
        cls=Qwen3Config, vocab_size=256, hidden_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, intermediate_size=128,
        tie_word_embeddings=False, max_position_embeddings=128, rms_norm_eps=1e-6,
        rope_parameters=dict(rope_type="yarn", rope_theta=1000000.0, factor=4.0,
                             original_max_position_embeddings=32),
        hub_rope_scaling=True),
}

DEMO_TEXTS = ["Hello", "The capital of France is", "def fibonacci(n):\n    if n < 2:\n        return n\n"
              "    return fibonacci(n - 1) + fibonacci(n - 2)\n\nprint(fibonacci("]


def randomise(model, seed):
    """Weights with unit-scale activations so logits are spread out and greedy has clear winners."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name or "lm_head" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)


def to_hub_layout(model_dir, num_experts):
    """transformers 5 may save fused expert tensors; the hub's Qwen3-MoE checkpoints hold one
    gate/up/down projection per expert. Rewrite to the hub's names if needed."""
    for fn in sorted(os.listdir(model_dir)):
        if not fn.endswith(".safetensors"):
            continue
        path = os.path.join(model_dir, fn)
        tensors = load_file(path)
        if not any("experts.gate_up_proj" in k or "experts.down_proj" in k for k in tensors):
            continue
        out = {}
        for k, t in tensors.items():
            if k.endswith("experts.gate_up_proj"):       # [E, 2I, H]: gate rows then up rows
                base = k[: -len("gate_up_proj")]
                inter = t.shape[1] // 2
                for e in range(num_experts):
                    out[f"{base}{e}.gate_proj.weight"] = t[e, :inter].contiguous()
                    out[f"{base}{e}.up_proj.weight"] = t[e, inter:].contiguous()
            elif k.endswith("experts.down_proj"):        # [E, H, I]
                base = k[: -len("down_proj")]
                for e in range(num_experts):
                    out[f"{base}{e}.down_proj.weight"] = t[e].contiguous()
            else:
                out[k] = t
        save_file(out, path, metadata={"format": "pt"})
        print(f"  rewrote {fn} to per-expert hub layout")
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        raise SystemExit("to_hub_layout does not rewrite sharded indexes; keep the MoE fixture unsharded")


def to_rope_scaling(model_dir):
    """Rewrite transformers 5's rope_parameters into the 4.x spelling hub configs and Qwen's
    model cards use: a top-level rope_theta and rope_scaling {rope_type, factor, ...}."""
    path = os.path.join(model_dir, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    params = cfg.pop("rope_parameters")
    cfg["rope_theta"] = params.pop("rope_theta")
    cfg["rope_scaling"] = params
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def load_fp32(model_dir):
    try:
        return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                    attn_implementation="eager").eval()
    except TypeError:
        return AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32,
                                                    attn_implementation="eager").eval()


@torch.no_grad()
def greedy(model, ids):
    seq = list(ids)
    min_gap = float("inf")
    for _ in range(GREEDY_TOKENS):
        logits = model(torch.tensor([seq])).logits[0, -1]
        top2 = torch.topk(logits, 2).values
        min_gap = min(min_gap, float(top2[0] - top2[1]))
        seq.append(int(torch.argmax(logits)))
    return seq[len(ids):], min_gap


def make(name, spec, out_root, tokenizer_dir, seed):
    spec = dict(spec)
    cls, shard, demo = spec.pop("cls"), spec.pop("shard", None), spec.pop("demo", False)
    hub_rope_scaling = spec.pop("hub_rope_scaling", False)
    cfg = cls(**spec)
    if not demo:
        cfg.bos_token_id, cfg.eos_token_id = 1, 2
    model_dir = os.path.join(out_root, name)
    shutil.rmtree(model_dir, ignore_errors=True)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="eager")
    randomise(model, seed)
    model = model.to(torch.bfloat16)
    model.generation_config.eos_token_id = [cfg.eos_token_id, cfg.bos_token_id] if demo else cfg.eos_token_id
    if demo:
        model.generation_config.do_sample = True
        model.generation_config.temperature = 0.6
        model.generation_config.top_p = 0.95
        model.generation_config.top_k = 20
    kwargs = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(model_dir, safe_serialization=True, **kwargs)
    if getattr(cfg, "num_experts", 0):
        to_hub_layout(model_dir, cfg.num_experts)
    if hub_rope_scaling:
        to_rope_scaling(model_dir)
    # The in-memory weights in a fresh fp32 model (model.float() would keep the rotary
    # inv_freq buffer rounded to bf16), to check the checkpoint as reloaded from disk.
    reference_model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32,
                                                       attn_implementation="eager").eval()
    reference_model.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
    model = load_fp32(model_dir)

    g = torch.Generator().manual_seed(seed + 1)
    if demo:
        for fn in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(tokenizer_dir, fn), model_dir)
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(model_dir)
        prompts = [tok(t)["input_ids"] for t in DEMO_TEXTS]
    else:
        prompts = [[int(torch.randint(3, cfg.vocab_size, (1,), generator=g))],
                   torch.randint(3, cfg.vocab_size, (7,), generator=g).tolist(),
                   torch.randint(3, cfg.vocab_size, (37,), generator=g).tolist()]

    tensors, records = {}, []
    with torch.no_grad():
        for p, ids in enumerate(prompts):
            logits = model(torch.tensor([ids])).logits[0].float()
            check = reference_model(torch.tensor([ids])).logits[0].float()
            drift = float((logits - check).abs().max())
            assert drift < 1e-4, f"{name}: reloaded checkpoint differs from the saved model by {drift}"
            # Full logits for the small vocabularies; the demo's 151,936-wide rows only at
            # the last position, to keep the fixtures small.
            positions = list(range(len(ids))) if cfg.vocab_size <= 4096 else [len(ids) - 1]
            tensors[f"logits.{p}"] = logits[positions].contiguous()
            cont, gap = greedy(model, ids)
            records.append(dict(ids=ids, logits_positions=positions, greedy=cont, greedy_min_gap=gap))
            print(f"  {name} prompt {p}: {len(ids)} tokens, greedy min top-2 gap {gap:.4f}")
    save_file(tensors, os.path.join(model_dir, "reference.safetensors"))
    # The rotary's own frequencies and cos/sin multiplier, to check the scaled ones exactly.
    rotary = model.model.rotary_emb
    rope = dict(inv_freq=rotary.inv_freq.tolist(), attention_scaling=float(rotary.attention_scaling))
    with open(os.path.join(model_dir, "reference.json"), "w") as f:
        json.dump(dict(model=name, greedy_tokens=GREEDY_TOKENS, dtype="float32 on bf16 weights",
                       rope=rope, prompts=records), f, indent=1)
    print(f"  {name}: files {sorted(os.listdir(model_dir))}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--tokenizer", default="tests/fixtures/qwen3-tokenizer")
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    torch.set_num_threads(os.cpu_count() or 1)
    for i, (name, spec) in enumerate(FIXTURES.items()):
        if args.only and name not in args.only:
            continue
        make(name, spec, args.out, args.tokenizer, seed=1234 + i)


if __name__ == "__main__":
    main()
