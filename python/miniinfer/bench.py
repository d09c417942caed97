"""The offline benchmark through the Python API, printing the same table as `miniinfer bench`.

    python bench/bench_miniinfer.py --model DIR --device cuda [--num-seqs 256]

Same workloads (bench/balanced.json for balanced, from the C++ side), the same warm-up, the
same timing (from submitting the batch to its last token) and the same speed of light as
`miniinfer bench`, so the two tables compare the Python path's overhead directly.
"""
from __future__ import annotations

import argparse
import json
import time
from typing import Any, Dict, List

from . import _lib
from .engine.llm_engine import LLMEngine
from .utils import SamplingParams

_HEADER = ("| workload | device | attention | page | graphs | overlap | requests | output tokens | "
           "seconds | tok/s | SOL tok/s | % of SOL |\n|---|---|---|---|---|---|---|---|---|---|---|---|")


def _parse_args(argv: Any = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="Hugging Face model directory")
    p.add_argument("--num-seqs", type=int, default=0,
                   help="Run the first N requests of each workload (0: all; balanced has 256)")
    p.add_argument("--workload", action="append",
                   help="balanced, decode128, decode256, short256, prefill256, bs1 (repeatable)")
    p.add_argument("--balanced-file", default="bench/balanced.json")
    p.add_argument("--json", default="", help="Also write the results as JSON here")
    p.add_argument("--runs", type=int, default=1,
                   help="Timed runs of each workload, back to back: the first run and the steady "
                        "state (the mean of the others) are reported apart")
    # The SOL model's figures (the H200's by default) are a GPU's: as `miniinfer bench`, the SOL
    # columns show for --device cuda, or when a figure is given.
    p.add_argument("--hbm-bytes-per-s", type=float, default=None)
    p.add_argument("--matmul-flops", type=float, default=None)
    # The engine options, with `miniinfer bench`'s flag names.
    p.add_argument("--device", default="cpu")
    p.add_argument("--load-format", default="auto")
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--max-model-len", type=int, default=0)
    p.add_argument("--max-num-batched-tokens", type=int, default=0)
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--kv-cache-mb", type=int, default=0)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--no-prefix-caching", action="store_true")
    p.add_argument("--attention-backend", default="auto")
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--tensor-parallel-size", type=int, default=1)
    p.add_argument("--enable-expert-parallel", action="store_true")
    p.add_argument("--disable-overlap", action="store_true")
    p.add_argument("--revision", default="main")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--generation-config", default="auto")
    return p.parse_args(argv)


def _engine_kwargs(a: argparse.Namespace) -> Dict[str, Any]:
    return dict(device=a.device, load_format=a.load_format, max_num_seqs=a.max_num_seqs,
                max_model_len=a.max_model_len, max_num_batched_tokens=a.max_num_batched_tokens,
                page_size=a.page_size, kv_cache_bytes=a.kv_cache_mb << 20,
                gpu_memory_utilization=a.gpu_memory_utilization,
                enable_prefix_caching=not a.no_prefix_caching,
                attention_backend=a.attention_backend, kv_cache_dtype=a.kv_cache_dtype,
                enforce_eager=a.enforce_eager,
                tensor_parallel_size=a.tensor_parallel_size,
                enable_expert_parallel=a.enable_expert_parallel,
                disable_overlap=a.disable_overlap, revision=a.revision, seed=a.seed,
                generation_config=a.generation_config)


def run_workload(engine: LLMEngine, workload: Dict[str, Any], a: argparse.Namespace) -> Dict[str, Any]:
    params = [SamplingParams(temperature=workload["temperature"], ignore_eos=True,
                             max_tokens=m, seed=i) for i, m in enumerate(workload["max_tokens"])]
    prompts: List[List[int]] = workload["prompts"]
    start = time.perf_counter()
    outputs = engine.generate(prompts, params, use_tqdm=False)
    seconds = time.perf_counter() - start
    output_tokens = sum(len(o["token_ids"]) for o in outputs)
    prompt_tokens = sum(len(p) for p in prompts)
    c = engine.config
    hardware_given = a.hbm_bytes_per_s is not None or a.matmul_flops is not None
    sol_seconds = None
    if c["device"] == "cuda" or hardware_given:
        sol_seconds = _lib.bench_sol_seconds(
            engine._live_handle(), workload,
            a.hbm_bytes_per_s if a.hbm_bytes_per_s is not None else 4.8e12,
            a.matmul_flops if a.matmul_flops is not None else 790e12)
    return {"workload": workload["name"], "device": c["device"],
            "attention_backend": ("fa2" if c["attention_backend"] == "auto" else
                                  c["attention_backend"]) if c["device"] == "cuda" else "cpu",
            "page_size": c["page_size"],
            "cuda_graphs": c["device"] == "cuda" and not c["enforce_eager"],
            "overlap": engine.overlapping,
            "requests": len(prompts), "prompt_tokens": prompt_tokens,
            "output_tokens": output_tokens, "seconds": seconds,
            "output_tok_per_s": output_tokens / seconds,
            "prompt_tok_per_s": prompt_tokens / seconds,
            "ms_per_output_token": 1000.0 * seconds / output_tokens,
            "sol_tok_per_s": output_tokens / sol_seconds if sol_seconds else None,
            "percent_of_sol": 100.0 * sol_seconds / seconds if sol_seconds else None}


def main(argv: Any = None) -> None:
    a = _parse_args(argv)
    if a.runs < 1:
        raise SystemExit(f"--runs {a.runs}: at least 1")
    workloads = []
    for name in a.workload or ["balanced"]:
        try:
            w = _lib.call_json("mi_bench_workload", name.encode(), a.balanced_file.encode())
        except ValueError as e:  # an unknown name, or multiturn (`miniinfer bench` only)
            raise SystemExit(f"--workload {name}: {e}") from None
        if a.num_seqs > 0:
            if a.num_seqs > len(w["prompts"]):
                raise SystemExit(f"--num-seqs {a.num_seqs}: {name} has {len(w['prompts'])} requests")
            w["prompts"], w["max_tokens"] = w["prompts"][:a.num_seqs], w["max_tokens"][:a.num_seqs]
        workloads.append(w)
    with LLMEngine(a.model, **_engine_kwargs(a)) as engine:
        # Warm-up, as `miniinfer bench`: one short request through every code path.
        engine.generate([[1] * 64], SamplingParams(max_tokens=8, ignore_eos=True, temperature=0.6),
                        use_tqdm=False)
        print(_HEADER, flush=True)
        results = []
        for w in workloads:
            speeds = []
            for run in range(1, a.runs + 1):
                r = run_workload(engine, w, a)
                r["run"] = run
                _print_row(r, run, a.runs)
                speeds.append(r["output_tok_per_s"])
                results.append(r)
            if a.runs > 1:
                print(f"| {w['name']}: first run {speeds[0]:.0f} tok/s, steady state "
                      f"{sum(speeds[1:]) / (a.runs - 1):.0f} tok/s (mean of runs 2-{a.runs}) |",
                      flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)
            f.write("\n")


def _print_row(r: Dict[str, Any], run: int, runs: int) -> None:
    """One result row, as `miniinfer bench` prints it."""
    name = r["workload"] + (f" (run {run})" if runs > 1 else "")
    sol = ("— | —" if r["sol_tok_per_s"] is None else
           f"{r['sol_tok_per_s']:.0f} | {r['percent_of_sol']:.1f}%")
    line = (f"| {name} | {r['device']} | {r['attention_backend']} | "
            f"{r['page_size']} | {'on' if r['cuda_graphs'] else 'off'} | "
            f"{'on' if r['overlap'] else 'off'} | {r['requests']} | "
            f"{r['output_tokens']} | {r['seconds']:.2f} | "
            f"{r['output_tok_per_s']:.0f} | {sol} |")
    if r["workload"] == "prefill256":
        line += f" prompt {r['prompt_tok_per_s']:.0f} tok/s"
    if r["workload"] == "bs1":
        line += f" {r['ms_per_output_token']:.3f} ms/token"
    print(line, flush=True)


if __name__ == "__main__":
    main()
