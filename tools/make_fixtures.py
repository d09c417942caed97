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

The hybrid Gated DeltaNet fixtures (last in the table: qwen3.5-tiny, qwen3.5-moe-tiny,
qwen3-next-tiny) are written as the hub publishes such checkpoints, and their reference holds more:

  layouts                qwen3.5-tiny: Qwen3_5ForCausalLM's own flat save (model_type qwen3_5_text);
                         qwen3.5-moe-tiny: the multimodal wrapper (qwen3_5_moe, text_config nested,
                         model.language_model.*, a one-block model.visual.* tower, an mtp.* layer),
                         experts fused (gate_up_proj [E, 2I, H], down_proj [E, H, I]), A_log and
                         linear_attn.norm.weight in F32, as the published Qwen3.5 files have them;
                         qwen3-next-tiny: in_proj_qkvz / in_proj_ba, per-expert experts, one dense
                         layer, an mtp.* layer, the release's 4.x rope spelling in config.json.
  norms                  zero-centred (x * (1 + w)) everywhere but the GDN's gated RMSNorm
                         (linear_attn.norm: x * w); randomise_hybrid sets w around 0 and 1 apiece.
  prompts                a fourth, of 200 tokens: four GDN chunks of 64 and four prefill chunks.
  reference.safetensors  also greedy_logits.<p> [32, vocab] f32: the no-cache logits at each
                         greedy step, for checking decode logits, not just tokens.
  reference.json         per prompt also: greedy_generate (transformers' generate() with its cache:
                         prefill by the chunked gated delta rule, each decode step by the recurrent
                         one), whether it equals greedy, the largest logit difference between the
                         two, and that of a prefill fed through the cache in chunks of 64;
                         qwen3.5-moe-tiny: the logit difference of the same files loaded as the
                         text-only Qwen3_5MoeForCausalLM; "gdn": which torch fallback ran where,
                         the decays exp(g) and betas seen; the class that made the reference.

Needs torch and transformers (e.g. the H200 machine). Usage:
  python3 tools/make_fixtures.py --out tests/fixtures [--tokenizer DIR] [--only NAME[,NAME]]
"""
import argparse
import importlib.util
import json
import math
import os
import shutil
import sys
from collections import Counter

import torch
from safetensors.torch import load_file, save_file
from transformers import (AutoModelForCausalLM, AutoModelForImageTextToText, GenerationConfig,
                          Qwen2Config, Qwen3_5MoeConfig, Qwen3_5TextConfig, Qwen3Config,
                          Qwen3MoeConfig, Qwen3NextConfig)

GREEDY_TOKENS = 32
# The hybrid fixtures' long prompt: past three GDN chunks of 64 (transformers' chunk_size) and three
# prefill chunks of 64, ending inside a fourth so the last chunk is padded.
LONG_PROMPT_LEN = 200
PREFILL_CHUNK = 64

# Qwen3.5's rotary as its configs spell it: a quarter of head_dim (64 here: 16 dims, 8 frequencies)
# and mRoPE sections over those 8 frequencies (the release has [11, 11, 10] over 32); text positions
# are equal in all three sections, so this is plain rotary for text.
QWEN35_ROPE = dict(rope_type="default", rope_theta=10000000.0, partial_rotary_factor=0.25,
                   mrope_interleaved=True, mrope_section=[3, 3, 2])

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
    # The hybrid Gated DeltaNet models (made by make_hybrid). head_dim 64 throughout: the GPU
    # attention is instantiated for 64 and 128, and the releases' 256 would not fit the size.
    # Qwen3.5 dense, as Qwen3_5ForCausalLM saves it: eight layers, so two full-attention layers
    # (3 and 7) among six GDN ones; GQA 4:1; linear heads 2 key to 6 value (Qwen3.5-27B's 1:3).
    "qwen3.5-tiny": dict(
        cls=Qwen3_5TextConfig, hybrid=True, vocab_size=512, hidden_size=64, num_hidden_layers=8,
        num_attention_heads=4, num_key_value_heads=1, head_dim=64, intermediate_size=192,
        linear_num_key_heads=2, linear_num_value_heads=6, linear_key_head_dim=64,
        linear_value_head_dim=64, linear_conv_kernel_dim=4, tie_word_embeddings=False,
        max_position_embeddings=4096, rms_norm_eps=1e-6, rope_parameters=QWEN35_ROPE),
    # Qwen3.5-MoE as the hub publishes it (see fix_qwen35_moe_files): the multimodal wrapper with
    # a one-block vision tower and an MTP layer the engine must skip; 8 experts top-2 (always
    # renormalised in Qwen3.5) plus the sigmoid-gated shared expert in every layer; GQA 8:2; linear
    # heads 2 to 4 (the 35B-A3B's 1:2).
    "qwen3.5-moe-tiny": dict(
        cls=Qwen3_5MoeConfig, hybrid=True, arch=AutoModelForImageTextToText,
        hub_files="qwen3.5-moe",
        text_config=dict(
            vocab_size=512, hidden_size=64, num_hidden_layers=4, num_attention_heads=8,
            num_key_value_heads=2, head_dim=64, linear_num_key_heads=2, linear_num_value_heads=4,
            linear_key_head_dim=64, linear_value_head_dim=64, linear_conv_kernel_dim=4,
            num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64,
            shared_expert_intermediate_size=64, tie_word_embeddings=False,
            max_position_embeddings=4096, rms_norm_eps=1e-6, rope_parameters=QWEN35_ROPE),
        vision_config=dict(depth=1, hidden_size=32, num_heads=2, intermediate_size=64, patch_size=4,
                           out_hidden_size=64, num_position_embeddings=16),
        tie_word_embeddings=False),
    # Qwen3-Next: fused in_proj_qkvz / in_proj_ba grouped by key head, 16 experts top-4
    # renormalised with the shared expert, layer 1 dense (mlp_only_layers), GQA 2:1, linear heads
    # 2 to 4, an MTP layer; config.json in the release's spelling (see fix_qwen3_next_files).
    "qwen3-next-tiny": dict(
        cls=Qwen3NextConfig, hybrid=True, hub_files="qwen3-next", vocab_size=512, hidden_size=64,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        intermediate_size=128, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=64, linear_value_head_dim=64, linear_conv_kernel_dim=4,
        num_experts=16, num_experts_per_tok=4, norm_topk_prob=True, moe_intermediate_size=32,
        shared_expert_intermediate_size=64, decoder_sparse_step=1, mlp_only_layers=[1],
        tie_word_embeddings=False, max_position_embeddings=4096, rms_norm_eps=1e-6,
        rope_parameters=dict(rope_type="default", rope_theta=5000000.0,
                             partial_rotary_factor=0.25)),
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
def greedy(model, ids, **forward_kwargs):
    """GREEDY_TOKENS argmax steps, each a forward over the whole sequence (no cache): the
    continuation, its smallest top-1/top-2 gap and each step's logits [GREEDY_TOKENS, vocab]."""
    seq, rows = list(ids), []
    min_gap = float("inf")
    for _ in range(GREEDY_TOKENS):
        logits = model(torch.tensor([seq]), **forward_kwargs).logits[0, -1]
        top2 = torch.topk(logits, 2).values
        min_gap = min(min_gap, float(top2[0] - top2[1]))
        seq.append(int(torch.argmax(logits)))
        rows.append(logits.float())
    return seq[len(ids):], min_gap, torch.stack(rows)


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
            cont, gap, _ = greedy(model, ids)
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


def randomise_hybrid(model, seed):
    """randomise() for Qwen3.5 and Qwen3-Next, whose norms differ: all are zero-centred
    (x * (1 + w), so w near 0 is scale 1) but the GDN's gated RMSNorm, linear_attn.norm (x * w).
    The decay exp(g) = exp(-A * softplus(a + dt_bias)) per token: A in [1, 8] and softplus(dt_bias)
    in [1e-3, 1e-2] put it at 0.92 to 0.999 for a = 0; a = in_proj_a(x), about N(0, 1), widens it
    (reference.json's gdn.decay_range has what the prompts met). Every head keeps some state across
    a 64-token chunk, some across the whole prompt; transformers' own init (A up to 16, dt_bias 1)
    would take decays down to 1e-28 and make the state a few tokens long."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("linear_attn.A_log"):
                p.copy_(torch.empty(p.shape).uniform_(1.0, 8.0, generator=g).log())
            elif name.endswith("linear_attn.dt_bias"):  # the inverse of softplus, log-uniform dt
                log_dt = torch.empty(p.shape).uniform_(math.log(1e-3), math.log(1e-2), generator=g)
                dt = log_dt.exp()
                p.copy_(dt + torch.log(-torch.expm1(-dt)))
            elif name.endswith("linear_attn.norm.weight") or (
                    "visual" in name and "norm" in name and name.endswith("weight")):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))  # x * w (and LayerNorm)
            elif "norm" in name and name.endswith("weight"):
                p.copy_(0.2 * torch.randn(p.shape, generator=g))  # zero-centred
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name or "lm_head" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:  # the last dim is the fan-in: [out, in], experts [E, out, in], conv1d [C, 1, 4]
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)


def mtp_tensors(cfg, seed):
    """One multi-token-prediction layer under mtp.*, named as the releases name it: Qwen3.5-35B-A3B
    ships 785 mtp tensors, 17 of the layer plus 256 experts x 3 projections one per expert (unfused,
    unlike its main layers). transformers skips mtp.* on load, and so must the engine. Random bf16
    values at the model's shapes, zero-centred norms."""
    h, i, e = cfg.hidden_size, cfg.moe_intermediate_size, cfg.num_experts
    q = cfg.num_attention_heads * cfg.head_dim
    kv = cfg.num_key_value_heads * cfg.head_dim
    shapes = {"mtp.fc.weight": (h, 2 * h), "mtp.pre_fc_norm_embedding.weight": (h,),
              "mtp.pre_fc_norm_hidden.weight": (h,), "mtp.norm.weight": (h,)}
    layer = {"input_layernorm.weight": (h,), "post_attention_layernorm.weight": (h,),
             "self_attn.q_proj.weight": (2 * q, h), "self_attn.k_proj.weight": (kv, h),
             "self_attn.v_proj.weight": (kv, h), "self_attn.o_proj.weight": (h, q),
             "self_attn.q_norm.weight": (cfg.head_dim,), "self_attn.k_norm.weight": (cfg.head_dim,),
             "mlp.gate.weight": (e, h), "mlp.shared_expert_gate.weight": (1, h),
             "mlp.shared_expert.gate_proj.weight": (cfg.shared_expert_intermediate_size, h),
             "mlp.shared_expert.up_proj.weight": (cfg.shared_expert_intermediate_size, h),
             "mlp.shared_expert.down_proj.weight": (h, cfg.shared_expert_intermediate_size)}
    for x in range(e):
        layer |= {f"mlp.experts.{x}.gate_proj.weight": (i, h),
                  f"mlp.experts.{x}.up_proj.weight": (i, h),
                  f"mlp.experts.{x}.down_proj.weight": (h, i)}
    shapes |= {f"mtp.layers.0.{k}": v for k, v in layer.items()}
    g = torch.Generator().manual_seed(seed)
    tensors = {}
    for k, shape in shapes.items():
        scale = 0.2 if len(shape) == 1 else shape[-1] ** -0.5
        tensors[k] = (scale * torch.randn(shape, generator=g)).to(torch.bfloat16)
    return tensors


def fuse_experts(tensors):
    """transformers 5.17 saves Qwen3.5-MoE experts one projection per expert (its loader's
    conversion, run backwards); the published Qwen3.5 files hold each layer's experts fused:
    gate_up_proj [E, 2I, H] (each expert's gate rows, then its up rows) and down_proj [E, H, I]."""
    out, experts = {}, {}
    for k, t in tensors.items():
        layer, fused, rest = k.partition(".mlp.experts.")
        if fused:
            x, proj = rest.split(".", 1)  # "3", "gate_proj.weight"
            experts.setdefault(layer, {})[int(x), proj] = t
        else:
            out[k] = t
    for layer, w in experts.items():
        num = len(w) // 3
        out[f"{layer}.mlp.experts.gate_up_proj"] = torch.stack(
            [torch.cat([w[x, "gate_proj.weight"], w[x, "up_proj.weight"]]) for x in range(num)])
        out[f"{layer}.mlp.experts.down_proj"] = torch.stack(
            [w[x, "down_proj.weight"] for x in range(num)])
    return out


# Stored F32 in the published Qwen3.5 checkpoints (all 36 F32 tensors of Qwen3.5-0.8B, per
# ms-swift #9972; Qwen3.5-27B per vLLM #51836), where everything else is bf16.
QWEN35_F32 = ("linear_attn.A_log", "linear_attn.norm.weight")


def edit_config(model_dir, edit):
    path = os.path.join(model_dir, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    edit(cfg)
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def fix_qwen35_moe_files(model_dir, f32_tensors, text_cfg, seed):
    """The multimodal Qwen3.5-MoE checkpoint as the hub has it: experts fused, the F32 tensors F32,
    an MTP layer, and the text_config keys the release writes that transformers does not (the
    sub-configs' dtype too, which transformers leaves at the float32 they were made in)."""
    path = os.path.join(model_dir, "model.safetensors")
    tensors = fuse_experts(load_file(path)) | f32_tensors | mtp_tensors(text_cfg, seed)
    save_file(tensors, path, metadata={"format": "pt"})

    def spell_as_release(cfg):
        cfg["vision_config"]["dtype"] = "bfloat16"
        cfg["text_config"].update(
            dtype="bfloat16", attn_output_gate=True, full_attention_interval=4,
            mamba_ssm_dtype="float32", mtp_num_hidden_layers=1, mtp_use_dedicated_embeddings=False)
    edit_config(model_dir, spell_as_release)


def fix_qwen3_next_files(model_dir, text_cfg, seed):
    """Qwen3-Next as the hub has it: per-expert experts (as transformers saves them), an MTP layer,
    and config.json in the release's spelling: rope_theta and partial_rotary_factor at the top,
    rope_scaling null, full_attention_interval beside layer_types."""
    to_hub_layout(model_dir, text_cfg.num_experts)
    path = os.path.join(model_dir, "model.safetensors")
    save_file(load_file(path) | mtp_tensors(text_cfg, seed), path, metadata={"format": "pt"})

    def spell_as_release(cfg):
        rope = cfg.pop("rope_parameters")
        cfg.update(rope_theta=rope["rope_theta"], rope_scaling=None, full_attention_interval=4,
                   partial_rotary_factor=rope["partial_rotary_factor"])
    edit_config(model_dir, spell_as_release)


class GdnTrace:
    """Which of transformers' torch gated-delta-rule fallbacks run, in which phase (set .phase;
    None counts nothing), and the decays exp(g) and betas they see. Swaps the functions in the
    modeling module for counting wrappers while in a with block."""
    FUNCTIONS = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule")

    def __init__(self, model):
        gdn = next(m for m in model.modules() if type(m).__name__.endswith("GatedDeltaNet"))
        self.module = sys.modules[type(gdn).__module__]
        self.phase, self.calls = None, Counter()
        self.decay, self.beta = [1.0, 0.0], [1.0, 0.0]  # [min, max]

    def __enter__(self):
        self.saved = {name: getattr(self.module, name) for name in self.FUNCTIONS}
        for name, fn in self.saved.items():
            setattr(self.module, name, self.counted(name, fn))
        return self

    def __exit__(self, *exc):
        for name, fn in self.saved.items():
            setattr(self.module, name, fn)

    def counted(self, name, fn):
        def call(query, *args, **kwargs):
            if self.phase is not None:
                tokens = "1 token" if query.shape[1] == 1 else "several tokens"
                state = "from a state" if kwargs.get("initial_state") is not None else "from zero"
                self.calls[f"{self.phase}: {name}, {tokens}, {state}"] += 1
                for seen, x in ((self.decay, kwargs["g"].exp()), (self.beta, kwargs["beta"])):
                    seen[:] = [min(seen[0], float(x.min())), max(seen[1], float(x.max()))]
            return fn(query, *args, **kwargs)
        return call


@torch.no_grad()
def generate_cached(model, ids):
    """transformers' generate(), greedy with its cache, EOS ignored: the tokens and raw logits."""
    config = GenerationConfig(do_sample=False, max_new_tokens=GREEDY_TOKENS, eos_token_id=None,
                              pad_token_id=0)
    mask = torch.ones(1, len(ids), dtype=torch.long)
    out = model.generate(torch.tensor([ids]), attention_mask=mask, generation_config=config,
                         output_logits=True, return_dict_in_generate=True)
    return out.sequences[0, len(ids):].tolist(), torch.cat(out.logits).float()


@torch.no_grad()
def chunked_prefill_logits(model, ids):
    """The prompt fed through transformers' cache PREFILL_CHUNK tokens at a time, the GDN state and
    conv window carried from chunk to chunk as the engine's chunked prefill carries them."""
    cache, rows = None, []
    for start in range(0, len(ids), PREFILL_CHUNK):
        out = model(torch.tensor([ids[start:start + PREFILL_CHUNK]]), past_key_values=cache,
                    use_cache=True)
        cache = out.past_key_values
        rows.append(out.logits[0].float())
    return torch.cat(rows)


def make_hybrid(name, spec, out_root, seed):
    """make() for the hybrid GDN models: the same reference (float32 on the bf16 weights as reloaded
    from disk) on files rewritten to the hub's layout, and the checks the module docstring lists."""
    spec = dict(spec)
    cls, arch = spec.pop("cls"), spec.pop("arch", AutoModelForCausalLM)
    hub_files = spec.pop("hub_files", None)
    spec.pop("hybrid")
    cfg = cls(**spec)
    text_cfg = cfg.get_text_config()
    text_cfg.bos_token_id, text_cfg.eos_token_id = 1, 2
    model_dir = os.path.join(out_root, name)
    shutil.rmtree(model_dir, ignore_errors=True)
    # Eager attention and the eager experts loop: transformers' plainest forward.
    impl = dict(dtype=torch.float32, attn_implementation="eager", experts_implementation="eager")
    torch.manual_seed(seed)
    model = arch.from_config(cfg, **impl)
    randomise_hybrid(model, seed)
    f32_tensors = {k: v.clone() for k, v in model.state_dict().items()
                   if hub_files == "qwen3.5-moe" and k.endswith(QWEN35_F32)}
    model = model.to(torch.bfloat16)
    model.generation_config.eos_token_id = text_cfg.eos_token_id
    model.save_pretrained(model_dir)
    if hub_files == "qwen3.5-moe":
        fix_qwen35_moe_files(model_dir, f32_tensors, text_cfg, seed + 2)
    elif hub_files == "qwen3-next":
        fix_qwen3_next_files(model_dir, text_cfg, seed + 2)
    reference_model = arch.from_config(cfg, **impl).eval()
    saved = {k: v.float() for k, v in model.state_dict().items()} | f32_tensors
    reference_model.load_state_dict(saved)
    model = arch.from_pretrained(model_dir, **impl).eval()
    # transformers also loads the multimodal files as the text-only class ("VLM compatibility").
    text_only = (None if arch is AutoModelForCausalLM else
                 AutoModelForCausalLM.from_pretrained(model_dir, **impl).eval())

    g = torch.Generator().manual_seed(seed + 1)
    prompts = [torch.randint(3, text_cfg.vocab_size, (n,), generator=g).tolist()
               for n in (1, 7, 37, LONG_PROMPT_LEN)]
    tensors, records = {}, []
    with GdnTrace(model) as trace, torch.no_grad():
        for p, ids in enumerate(prompts):
            trace.phase = None  # the cross-checks' calls are not the reference's
            check = reference_model(torch.tensor([ids]), use_cache=False).logits[0].float()
            other = text_only and text_only(torch.tensor([ids]), use_cache=False).logits[0].float()
            trace.phase = "forward without cache"
            logits = model(torch.tensor([ids]), use_cache=False).logits[0].float()
            drift = float((logits - check).abs().max())
            assert drift < 1e-4, f"{name}: reloaded checkpoint differs from the saved model by {drift}"
            record = dict(ids=ids, logits_positions=list(range(len(ids))))
            if text_only is not None:
                record["text_only_class_max_logit_diff"] = float((logits - other).abs().max())
            cont, gap, step_logits = greedy(model, ids, use_cache=False)
            trace.phase = "generate"
            generated, generated_logits = generate_cached(model, ids)
            # Step k's logits are comparable while the tokens before it agree.
            differ = [k for k, (a, b) in enumerate(zip(cont, generated)) if a != b]
            steps = differ[0] + 1 if differ else GREEDY_TOKENS
            trace.phase = f"prefill in chunks of {PREFILL_CHUNK} through the cache"
            chunked = chunked_prefill_logits(model, ids)
            tensors[f"logits.{p}"] = logits.contiguous()
            tensors[f"greedy_logits.{p}"] = step_logits.contiguous()
            record.update(
                greedy=cont, greedy_min_gap=gap, greedy_generate=generated,
                generate_matches_greedy=generated == cont,
                generate_max_logit_diff=float(
                    (generated_logits[:steps] - step_logits[:steps]).abs().max()),
                chunked_prefill_max_logit_diff=float((chunked - logits).abs().max()))
            records.append(record)
            print(f"  {name} prompt {p}: {len(ids)} tokens, greedy min top-2 gap {gap:.4f}, "
                  f"generate {'matches' if generated == cont else 'DIFFERS'} (logits within "
                  f"{record['generate_max_logit_diff']:.2e}), chunked prefill within "
                  f"{record['chunked_prefill_max_logit_diff']:.2e}")
    save_file(tensors, os.path.join(model_dir, "reference.safetensors"))
    decoder = model.model.language_model if hasattr(model.model, "language_model") else model.model
    rotary = decoder.rotary_emb
    rope = dict(inv_freq=rotary.inv_freq.tolist(), attention_scaling=float(rotary.attention_scaling))
    # The torch fallbacks are transformers' readable reference; fla or causal_conv1d replace them.
    installed = {pkg: importlib.util.find_spec(pkg) is not None
                 for pkg in ("fla", "causal_conv1d", "kernels")}
    assert not any(installed.values()), f"{name}: want the torch fallbacks, found {installed}"
    gdn = dict(
        prefill="torch_chunk_gated_delta_rule (chunk_size 64, q/k L2-normalised in fp32)",
        decode="torch_recurrent_gated_delta_rule (one token from the cached state)",
        conv="causal_conv1d_fn (prefill) / causal_conv1d_update (decode), torch fallbacks",
        packages_installed=installed, calls=dict(sorted(trace.calls.items())),
        decay_range=trace.decay, beta_range=trace.beta)
    dtype = "float32 on bf16 weights" + (" (A_log, linear_attn.norm.weight stored F32)"
                                         if f32_tensors else "")
    implementation = dict(model_class=type(model).__name__, attention="eager", experts="eager",
                          device="cpu")
    with open(os.path.join(model_dir, "reference.json"), "w") as f:
        json.dump(dict(model=name, greedy_tokens=GREEDY_TOKENS, dtype=dtype,
                       implementation=implementation, rope=rope, gdn=gdn, prompts=records),
                  f, indent=1)
    print(f"  {name}: files {sorted(os.listdir(model_dir))}")


def bf16_yardstick(model_dir, arch=AutoModelForCausalLM):
    """Hugging Face's own bf16 model against its fp32 one, teacher-forced on each prompt of the
    fixture's reference.json (prompt + greedy), written there as prompts[i]["bf16"]: how far a
    correct bf16 implementation lands from the fp32 reference. An MoE model's bf16 router flips
    near-tied experts, which moves a position's logits by far more than bf16 rounding does; the
    MoE GPU tests bound their own difference by this."""
    path = os.path.join(model_dir, "reference.json")
    with open(path) as f:
        ref = json.load(f)
    impl = dict(attn_implementation="eager", experts_implementation="eager")
    m32 = arch.from_pretrained(model_dir, dtype=torch.float32, **impl).eval()
    m16 = arch.from_pretrained(model_dir, dtype=torch.bfloat16, **impl).eval()
    for p in ref["prompts"]:
        seq = p["ids"] + p["greedy"]
        x = torch.tensor([seq[:-1]])
        with torch.no_grad():
            a = m32(x, use_cache=False).logits[0].float()
            b = m16(x, use_cache=False).logits[0].float()
        n = len(p["ids"])
        row = (a - b).abs().max(dim=1).values
        largest = float(a.abs().max())
        p["bf16"] = dict(max_dlogit=float(row.max()), largest_logit=largest,
                         positions_beyond_5pct=int((row > 0.05 * largest).sum()),
                         greedy_argmax_differs=int((a[n - 1:].argmax(1) != b[n - 1:].argmax(1)).sum()))
        print(f"  {os.path.basename(model_dir)} prompt of {n}: bf16 {p['bf16']}")
    with open(path, "w") as f:
        json.dump(ref, f, indent=1)


def is_moe(spec):
    return any(k in spec for k in ("num_experts", "num_local_experts")) or \
        any(k in spec.get("text_config", {}) for k in ("num_experts",))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--tokenizer", default="tests/fixtures/qwen3-tokenizer")
    ap.add_argument("--only", nargs="*", metavar="NAME[,NAME]",
                    help="make only these fixtures; the others' files are left as they are")
    ap.add_argument("--bf16-yardstick-only", action="store_true",
                    help="only (re)write the MoE fixtures' bf16 yardstick (bf16_yardstick) into "
                         "their existing reference.json")
    args = ap.parse_args()
    only = {name for arg in args.only or [] for name in arg.split(",") if name}
    if only - FIXTURES.keys():
        raise SystemExit(f"unknown {sorted(only - FIXTURES.keys())}; fixtures: {list(FIXTURES)}")
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    torch.set_num_threads(os.cpu_count() or 1)
    # Seeds follow the table order, whatever --only picks: a fixture's files don't depend on it.
    for i, (name, spec) in enumerate(FIXTURES.items()):
        if only and name not in only:
            continue
        if not args.bf16_yardstick_only:
            if spec.get("hybrid"):
                make_hybrid(name, spec, args.out, seed=1234 + i)
            else:
                make(name, spec, args.out, args.tokenizer, seed=1234 + i)
        if is_moe(spec):
            bf16_yardstick(os.path.join(args.out, name), spec.get("arch", AutoModelForCausalLM))


if __name__ == "__main__":
    main()
