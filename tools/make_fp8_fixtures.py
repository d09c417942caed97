#!/usr/bin/env python3
"""Make the block-scaled FP8 fixtures: checkpoints in Qwen's official FP8 format (as
Qwen3-0.6B-FP8 and Qwen3-30B-A3B-FP8 ship) plus Hugging Face's own outputs on them.

  qwen3-tiny-fp8   tests/fixtures/qwen3-tiny's bf16 weights quantized (its prompts too, so a test
                   can set the FP8 model against the bf16 one on the same tokens)
  qwen3-moe-fp8    a new small Qwen3-MoE (8 experts of moe_intermediate_size 128, top-2, layer 1
                   dense, untied head), made as tools/make_fixtures.py makes its fixtures, then
                   quantized; its config lists modules_to_not_convert as some releases do

The format: config.json gains
  "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                          "weight_block_size": [128, 128]}
and every q/k/v/o and gate/up/down projection (dense and per expert) is stored as an F8_E4M3
`weight` [out, in] with an F32 `weight_scale_inv` [out / 128, in / 128], quantized as
transformers' own Fp8Quantize does (integrations/finegrained_fp8.py): per 128 x 128 block,
scale = 448 / max|w| (1 for an all-zero block), weight = e4m3(clamp(w x scale, +-448)) and
weight_scale_inv = 1 / scale. Embeddings, norms, the MoE routers (mlp.gate) and lm_head stay bf16.

The reference: transformers loads the FP8 directory with
FineGrainedFP8Config(dequantize=True) in float32 on the CPU (its FP8 matmuls are Triton/DeepGEMM
GPU kernels; dequantize=True is its CPU path): every FP8 weight becomes e4m3 value x block
scale, computed in f32, and the model runs in float32 with exact activations. The tool checks
that the loaded weights are exactly that dequantization before writing anything. So the
reference is the weight-only error; MiniInfer's block-scaled W8A8 path adds activation
quantization on top, which tests/unit/test_fp8_model.cpp measures against it.

reference.safetensors and reference.json have tools/make_fixtures.py's layout (logits.<p> of
every prompt position; greedy continuations of 32 tokens without cache, their smallest top-2 gap)
and also the W8A8 arithmetic emulated on that model (W8A8Emulation: every FP8 projection's input
quantized per token and 128-group as finegrained-fp8's act_quant does, then multiplied by the
dequantized weight): w8a8_logits.<p>, and greedy_w8a8 with its smallest gap. transformers cannot
run its own W8A8 kernels without a GPU; this is the same arithmetic in torch, up to f32 order.

Needs torch and transformers >= 5. Usage:
  python3 tools/make_fp8_fixtures.py --out tests/fixtures [--only NAME[,NAME]]
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, FineGrainedFP8Config, Qwen3MoeConfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures  # noqa: E402  (its model recipe, hub layout and greedy loop)

BLOCK = 128
FP8_MAX = 448.0
QUANTIZATION_CONFIG = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                       "weight_block_size": [BLOCK, BLOCK]}
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

MOE_SPEC = dict(
    cls=Qwen3MoeConfig, vocab_size=512, hidden_size=128, num_hidden_layers=3,
    num_attention_heads=4, num_key_value_heads=2, head_dim=128, intermediate_size=256,
    moe_intermediate_size=128, num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
    decoder_sparse_step=1, mlp_only_layers=[1], tie_word_embeddings=False,
    rope_theta=1000000.0, max_position_embeddings=4096, rms_norm_eps=1e-6)


def is_projection(name):
    parts = name.split(".")
    return len(parts) >= 2 and parts[-1] == "weight" and parts[-2] in PROJECTIONS


def quantize_block_fp8(w):
    """[out, in] -> (e4m3 [out, in], f32 weight_scale_inv [out / 128, in / 128])."""
    rows, cols = w.shape
    assert rows % BLOCK == 0 and cols % BLOCK == 0, f"{tuple(w.shape)} is not in whole blocks"
    blocks = w.float().reshape(rows // BLOCK, BLOCK, cols // BLOCK, BLOCK)
    amax = blocks.abs().amax(dim=(1, 3))
    scale = torch.where(amax > 0, FP8_MAX / torch.where(amax > 0, amax, 1.0), 1.0)
    q = (blocks * scale[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.reshape(rows, cols), (1.0 / scale).float()


def dequantize_block_fp8(q, scale_inv):
    rows, cols = q.shape
    blocks = q.float().reshape(rows // BLOCK, BLOCK, cols // BLOCK, BLOCK)
    return (blocks * scale_inv[:, None, :, None]).reshape(rows, cols)


def write_fp8_checkpoint(src_dir, out_dir, modules_to_not_convert=None):
    """src_dir's bf16 checkpoint (one model.safetensors) quantized into out_dir."""
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    tensors = load_file(os.path.join(src_dir, "model.safetensors"))
    out, dequantized = {}, {}
    for name, t in sorted(tensors.items()):
        if is_projection(name):
            q, scale_inv = quantize_block_fp8(t)
            out[name] = q
            out[name[: -len("weight")] + "weight_scale_inv"] = scale_inv
            dequantized[name] = dequantize_block_fp8(q, scale_inv)
        else:
            out[name] = t
            dequantized[name] = t.float()
    save_file(out, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(src_dir, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = dict(QUANTIZATION_CONFIG)
    if modules_to_not_convert:
        cfg["quantization_config"]["modules_to_not_convert"] = modules_to_not_convert
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    shutil.copy(os.path.join(src_dir, "generation_config.json"), out_dir)
    return dequantized


def load_dequantized(model_dir):
    return AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager", experts_implementation="eager",
        quantization_config=FineGrainedFP8Config(dequantize=True)).eval()


def check_dequantized(model, dequantized):
    """transformers' loaded weights are exactly e4m3 x scale (and the bf16 tensors as stored)."""
    state = model.state_dict()
    for name, want in dequantized.items():
        if name in state:
            got = state[name]
        else:  # transformers 5 fuses experts: gate_up_proj [E, 2I, H], down_proj [E, H, I]
            base, e, proj = name.rsplit(".", 3)[0], int(name.split(".")[-3]), name.split(".")[-2]
            if proj == "down_proj":
                got = state[f"{base}.down_proj"][e]
            else:
                fused = state[f"{base}.gate_up_proj"][e]
                half = fused.shape[0] // 2
                got = fused[:half] if proj == "gate_proj" else fused[half:]
        assert got.dtype == torch.float32, f"{name}: loaded as {got.dtype}"
        assert torch.equal(got, want), f"{name}: transformers' weights differ from e4m3 x scale"


def make_moe_source(tmp, seed):
    """A bf16 Qwen3-MoE checkpoint in the hub's per-expert layout, as make_fixtures.make does."""
    spec = dict(MOE_SPEC)
    cfg = spec.pop("cls")(**spec)
    cfg.bos_token_id, cfg.eos_token_id = 1, 2
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="eager")
    make_fixtures.randomise(model, seed)
    model = model.to(torch.bfloat16)
    model.generation_config.eos_token_id = cfg.eos_token_id
    model.save_pretrained(tmp, safe_serialization=True)
    make_fixtures.to_hub_layout(tmp, cfg.num_experts)
    return cfg.vocab_size


def quantize_activations(x):
    """finegrained-fp8's dynamic activation quantization, in torch on the CPU: per token and
    group of 128 along the last dimension s = max|x| / 448, x -> e4m3(x / max(s, 1e-12)) x s."""
    groups = x.float().reshape(*x.shape[:-1], x.shape[-1] // BLOCK, BLOCK)
    s = groups.abs().amax(dim=-1, keepdim=True) / FP8_MAX
    q = (groups / s.clamp(min=1e-12)).to(torch.float8_e4m3fn).float()
    return (q * s).reshape(x.shape).to(x.dtype)


class W8A8Emulation:
    """Inside it, every linear over an FP8 weight of `model` (its dequantized projections, the
    fused experts' slices included) quantizes its input first, as FP8Linear and FP8Experts do on
    the GPU: sum_i (q_i s_x)(w_i s_w) is the block-scaled product up to f32 rounding order."""

    def __init__(self, model):
        self.ranges = [(p.data_ptr(), p.data_ptr() + p.numel() * p.element_size())
                       for name, p in model.named_parameters()
                       if is_projection(name) or name.endswith(("experts.gate_up_proj",
                                                                 "experts.down_proj"))]

    def __enter__(self):
        self.linear = torch.nn.functional.linear

        def linear(x, weight, bias=None):
            if any(lo <= weight.data_ptr() < hi for lo, hi in self.ranges):
                x = quantize_activations(x)
            return self.linear(x, weight, bias)
        torch.nn.functional.linear = linear
        return self

    def __exit__(self, *exc):
        torch.nn.functional.linear = self.linear


def write_reference(name, model_dir, prompts, source):
    model = load_dequantized(model_dir)
    tensors, records = {}, []
    with torch.no_grad():
        for p, ids in enumerate(prompts):
            logits = model(torch.tensor([ids])).logits[0].float()
            positions = list(range(len(ids)))
            tensors[f"logits.{p}"] = logits[positions].contiguous()
            cont, gap, _ = make_fixtures.greedy(model, ids)
            with W8A8Emulation(model):
                w8a8 = model(torch.tensor([ids])).logits[0].float()
                cont_w8a8, gap_w8a8, _ = make_fixtures.greedy(model, ids)
            tensors[f"w8a8_logits.{p}"] = w8a8[positions].contiguous()
            records.append(dict(ids=ids, logits_positions=positions, greedy=cont,
                                greedy_min_gap=gap, greedy_w8a8=cont_w8a8,
                                greedy_w8a8_min_gap=gap_w8a8))
            print(f"  {name} prompt {p}: {len(ids)} tokens, greedy min top-2 gap {gap:.4f}; "
                  f"W8A8 emulated: max |dlogit| {float((w8a8 - logits).abs().max()):.3f}, "
                  f"greedy min gap {gap_w8a8:.4f}, "
                  f"{sum(a == b for a, b in zip(cont, cont_w8a8))} of {len(cont)} tokens equal")
    save_file(tensors, os.path.join(model_dir, "reference.safetensors"))
    with open(os.path.join(model_dir, "reference.json"), "w") as f:
        json.dump(dict(model=name, greedy_tokens=make_fixtures.GREEDY_TOKENS,
                       dtype="float32 on FP8 weights dequantized by transformers "
                             "(FineGrainedFP8Config(dequantize=True))",
                       source=source, prompts=records), f, indent=1)
    for fn in os.listdir(model_dir):
        os.chmod(os.path.join(model_dir, fn), 0o644)
    print(f"  {name}: files {sorted(os.listdir(model_dir))}")
    return model


def make_dense(out_root):
    src = os.path.join(out_root, "qwen3-tiny")
    out = os.path.join(out_root, "qwen3-tiny-fp8")
    dequantized = write_fp8_checkpoint(src, out)
    with open(os.path.join(src, "reference.json")) as f:
        prompts = [p["ids"] for p in json.load(f)["prompts"]]
    model = write_reference("qwen3-tiny-fp8", out, prompts, "qwen3-tiny quantized")
    check_dequantized(model, dequantized)


def make_moe(out_root, seed):
    out = os.path.join(out_root, "qwen3-moe-fp8")
    with tempfile.TemporaryDirectory() as tmp:
        vocab = make_moe_source(tmp, seed)
        dequantized = write_fp8_checkpoint(tmp, out, modules_to_not_convert=["lm_head"])
    g = torch.Generator().manual_seed(seed + 1)
    prompts = [[int(torch.randint(3, vocab, (1,), generator=g))],
               torch.randint(3, vocab, (7,), generator=g).tolist(),
               torch.randint(3, vocab, (37,), generator=g).tolist()]
    model = write_reference("qwen3-moe-fp8", out, prompts,
                            "a new Qwen3-MoE (make_fp8_fixtures.MOE_SPEC) quantized")
    check_dequantized(model, dequantized)


FIXTURES = {"qwen3-tiny-fp8": lambda out: make_dense(out),
            "qwen3-moe-fp8": lambda out: make_moe(out, seed=4321)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--only", nargs="*", metavar="NAME[,NAME]")
    args = ap.parse_args()
    only = {name for arg in args.only or [] for name in arg.split(",") if name}
    if only - FIXTURES.keys():
        raise SystemExit(f"unknown {sorted(only - FIXTURES.keys())}; fixtures: {list(FIXTURES)}")
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    for name, make in FIXTURES.items():
        if not only or name in only:
            make(args.out)


if __name__ == "__main__":
    main()
