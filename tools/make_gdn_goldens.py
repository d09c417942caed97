#!/usr/bin/env python3
"""Writes tests/fixtures/gdn-ops/gdn_ops.safetensors: Hugging Face's outputs for the Gated
DeltaNet operations, the goldens of the CPU ops in src/kernels/cpu/gated_delta_net.h
(tests/unit/test_gated_delta_net.cpp).

Every output comes from transformers' own torch functions (models/qwen3_5/modeling_qwen3_5.py;
qwen3_next's are the same code), run in float32 on random inputs rounded to bf16 (stored as BF16,
so the file is small and the inputs are exact). The batch is a flattened one as the engine runs
it: sequences of SEQ_LENS tokens, rows [query_start[s], query_start[s+1]) of each tensor; some
start from a state (a decode step, a prefill chunk after a cached prefix), the others from zeros.

  conv.*    causal_conv1d_fn (a sequence from zeros) or, from a state, causal_conv1d_update
            (one token) / the cache's concatenation then causal_conv1d_fn (several), SiLU.
            x [T, C] bf16, weight [C, K] bf16, state_in [S, K-1, C] bf16 (HF keeps K columns,
            the oldest unused: it is random there), out [T, C] f32, state_out [S, K-1, C] f32.
  gates.*   g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b) as the GatedDeltaNet
            forward computes them: a, b [T, Hv] bf16 (a few a far past softplus' threshold 20),
            a_log, dt_bias [Hv] bf16 -> g, beta [T, Hv] f32 (the delta rule's inputs below).
  delta.*   torch_chunk_gated_delta_rule (chunk 64) and torch_recurrent_gated_delta_rule with
            use_qk_l2norm_in_kernel (as both models call them), q and k repeated to the value
            heads with repeat_interleave: q, k [T, Hk, Dk] bf16, v [T, Hv, Dv] bf16,
            state_in [S, Hv, Dk, Dv] bf16 -> chunk_out, recurrent_out [T, Hv, Dv] f32,
            chunk_state, recurrent_state [S, Hv, Dk, Dv] f32.
  norm.*    Qwen3_5RMSNormGated (w * rms_norm(x) * silu(z)): x, z [R, Dv] bf16, weight [Dv]
            bf16 -> out f32; Qwen3_5RMSNorm (zero-centred, x * (1 + w)): x [R, D], weight [D]
            -> zc_out f32.

The metadata's "config" (JSON) holds the sizes, seq_lens, from_state and eps.

Needs torch, safetensors and transformers 5.17. Usage:
  python3 tools/make_gdn_goldens.py [--out tests/fixtures/gdn-ops/gdn_ops.safetensors]
"""
import argparse
import json
import os

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers.models.qwen3_5 import modeling_qwen3_5 as hf

SEQ_LENS = [1, 5, 63, 64, 65, 130]  # odd lengths around the chunk of 64; 130 from zeros
FROM_STATE = [True, True, False, True, True, False]
NUM_K_HEADS, NUM_V_HEADS, HEAD_K_DIM, HEAD_V_DIM = 2, 4, 16, 8
CONV_CHANNELS, CONV_KERNEL = 16, 4
NORM_ROWS, ZC_NORM_DIM, EPS = 24, 48, 1e-6
# Per value head, as A_log = log(A): weak to strong decay (exp(g) from ~0.99 down to ~1e-8).
A_PER_HEAD = [0.02, 0.4, 3.0, 12.0]


def bf16(t):
    """Rounds to bf16 and back: the value stored in the file is the value HF saw."""
    return t.to(torch.bfloat16).float()


def conv_goldens(gen, starts):
    T, C, K = starts[-1], CONV_CHANNELS, CONV_KERNEL
    x = bf16(torch.randn(T, C, generator=gen))
    weight = bf16(torch.randn(C, K, generator=gen) * 0.5)
    hf_state = bf16(torch.randn(len(SEQ_LENS), C, K, generator=gen))  # HF's [C, K] per sequence
    out = torch.empty(T, C)
    state_out = torch.empty(len(SEQ_LENS), K - 1, C)
    for s, (lo, hi) in enumerate(zip(starts[:-1], starts[1:])):
        xs = x[lo:hi].T.unsqueeze(0)  # HF's [batch, channels, tokens]
        n = hi - lo
        if not FROM_STATE[s]:
            hf_state[s].zero_()
            o = hf.causal_conv1d_fn(xs, weight, None, activation="silu")
            window = torch.cat([hf_state[s].unsqueeze(0), xs], dim=-1)[..., -K:]
        elif n == 1:
            state = hf_state[s].unsqueeze(0).clone()
            o = hf.causal_conv1d_update(xs, state, weight, None, activation="silu")
            window = state
        else:  # the forward's path with a cache: update_conv_state concatenates, then conv
            full = torch.cat([hf_state[s].unsqueeze(0), xs], dim=-1)
            o = hf.causal_conv1d_fn(full, weight, None, activation="silu")[..., -n:]
            window = full[..., -K:]
        out[lo:hi] = o[0].T
        state_out[s] = window[0, :, 1:].T  # the K-1 newest inputs: all the next token needs
    # Our state is [K-1, C]: HF's newest K-1 columns, transposed. Its oldest column is unused.
    state_in = hf_state[:, :, 1:].transpose(1, 2).contiguous()
    return {"conv.x": x, "conv.weight": weight, "conv.state_in": state_in, "conv.out": out,
            "conv.state_out": state_out}


def gate_goldens(gen, T):
    a = torch.randn(T, NUM_V_HEADS, generator=gen)
    a[3, 0], a[7, 1], a[11, 2] = 30.0, -30.0, 19.5  # both sides of softplus' threshold of 20
    a = bf16(a)
    b = bf16(torch.randn(T, NUM_V_HEADS, generator=gen) * 2)
    a_log = bf16(torch.log(torch.tensor(A_PER_HEAD)))
    dt_bias = bf16(1 + 0.5 * torch.randn(NUM_V_HEADS, generator=gen))
    # As Qwen3_5GatedDeltaNet.forward writes them (A_log and dt_bias are parameters there).
    beta = b.sigmoid()
    g = -a_log.float().exp() * F.softplus(a.float() + dt_bias)
    return {"gates.a": a, "gates.b": b, "gates.a_log": a_log, "gates.dt_bias": dt_bias,
            "gates.g": g, "gates.beta": beta}


def delta_goldens(gen, starts, g, beta):
    T, S = starts[-1], len(SEQ_LENS)
    q = bf16(torch.randn(T, NUM_K_HEADS, HEAD_K_DIM, generator=gen))
    k = bf16(torch.randn(T, NUM_K_HEADS, HEAD_K_DIM, generator=gen))
    v = bf16(torch.randn(T, NUM_V_HEADS, HEAD_V_DIM, generator=gen))
    state_in = bf16(torch.randn(S, NUM_V_HEADS, HEAD_K_DIM, HEAD_V_DIM, generator=gen) * 0.5)
    ratio = NUM_V_HEADS // NUM_K_HEADS
    result = {"delta.q": q, "delta.k": k, "delta.v": v, "delta.state_in": state_in}
    for name, fn in (("chunk", hf.torch_chunk_gated_delta_rule),
                     ("recurrent", hf.torch_recurrent_gated_delta_rule)):
        out = torch.empty(T, NUM_V_HEADS, HEAD_V_DIM)
        state_out = torch.empty(S, NUM_V_HEADS, HEAD_K_DIM, HEAD_V_DIM)
        for s, (lo, hi) in enumerate(zip(starts[:-1], starts[1:])):
            qs, ks = (x[lo:hi].repeat_interleave(ratio, dim=1).unsqueeze(0) for x in (q, k))
            initial = state_in[s:s + 1].clone() if FROM_STATE[s] else None
            o, st = fn(qs, ks, v[lo:hi].unsqueeze(0), g=g[lo:hi].unsqueeze(0),
                       beta=beta[lo:hi].unsqueeze(0), initial_state=initial,
                       output_final_state=True, use_qk_l2norm_in_kernel=True)
            out[lo:hi], state_out[s] = o[0], st[0]
        result[f"delta.{name}_out"] = out
        result[f"delta.{name}_state"] = state_out
    for s, from_state in enumerate(FROM_STATE):
        if not from_state:
            result["delta.state_in"][s].zero_()
    return result


def norm_goldens(gen):
    x = bf16(torch.randn(NORM_ROWS, HEAD_V_DIM, generator=gen) * 3)
    z = bf16(torch.randn(NORM_ROWS, HEAD_V_DIM, generator=gen) * 2)
    gated = hf.Qwen3_5RMSNormGated(HEAD_V_DIM, eps=EPS)
    with torch.no_grad():
        gated.weight.copy_(bf16(1 + 0.3 * torch.randn(HEAD_V_DIM, generator=gen)))
        out = gated(x, z)
    zc_x = bf16(torch.randn(NORM_ROWS, ZC_NORM_DIM, generator=gen) * 3)
    zc = hf.Qwen3_5RMSNorm(ZC_NORM_DIM, eps=EPS)
    with torch.no_grad():
        zc.weight.copy_(bf16(0.3 * torch.randn(ZC_NORM_DIM, generator=gen)))
        zc_out = zc(zc_x)
    return {"norm.x": x, "norm.z": z, "norm.weight": gated.weight.detach().clone(),
            "norm.out": out, "norm.zc_x": zc_x, "norm.zc_weight": zc.weight.detach().clone(),
            "norm.zc_out": zc_out}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="tests/fixtures/gdn-ops/gdn_ops.safetensors")
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(47)
    starts = [0]
    for n in SEQ_LENS:
        starts.append(starts[-1] + n)
    tensors = {}
    tensors.update(conv_goldens(gen, starts))
    tensors.update(gate_goldens(gen, starts[-1]))
    tensors.update(delta_goldens(gen, starts, tensors["gates.g"], tensors["gates.beta"]))
    tensors.update(norm_goldens(gen))
    inputs = ("conv.x", "conv.weight", "conv.state_in", "gates.a", "gates.b", "gates.a_log",
              "gates.dt_bias", "delta.q", "delta.k", "delta.v", "delta.state_in", "norm.x",
              "norm.z", "norm.weight", "norm.zc_x", "norm.zc_weight")
    for name, t in tensors.items():  # inputs hold bf16 values: store them as such, exactly
        tensors[name] = t.to(torch.bfloat16) if name in inputs else t.float().contiguous()
    config = {"seq_lens": SEQ_LENS, "from_state": FROM_STATE, "num_k_heads": NUM_K_HEADS,
              "num_v_heads": NUM_V_HEADS, "head_k_dim": HEAD_K_DIM, "head_v_dim": HEAD_V_DIM,
              "conv_channels": CONV_CHANNELS, "conv_kernel": CONV_KERNEL, "chunk_size": 64,
              "eps": EPS, "transformers": __import__("transformers").__version__}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, args.out,
              metadata={"config": json.dumps(config)})
    print(f"{args.out}: {os.path.getsize(args.out)} bytes")
    d = (tensors["delta.chunk_out"] - tensors["delta.recurrent_out"]).abs().max().item()
    print(f"HF chunked vs recurrent output: max |diff| {d:.3g}, "
          f"largest |out| {tensors['delta.chunk_out'].abs().max().item():.3g}")


if __name__ == "__main__":
    main()
