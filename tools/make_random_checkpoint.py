"""Writes a randomly initialised Hugging Face checkpoint (bf16 safetensors) for a config.json.

For measuring the loader at a real model's size without downloading it (the device has no
internet): e.g. Qwen3-0.6B's shape, bench/qwen3-0.6b/config.json, is a 1.5 GB checkpoint.

    python3 tools/make_random_checkpoint.py bench/qwen3-0.6b /tmp/qwen3-0.6b-random
"""
import argparse
import shutil
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config_dir", help="a folder holding config.json")
    ap.add_argument("out", help="where the checkpoint goes")
    args = ap.parse_args()
    torch.manual_seed(0)
    cfg = AutoConfig.from_pretrained(args.config_dir)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    out = Path(args.out)
    model.save_pretrained(out, safe_serialization=True)
    shutil.copy(Path(args.config_dir) / "config.json", out / "config.json")
    size = sum(p.stat().st_size for p in out.glob("*.safetensors"))
    print(f"{out}: {size / 1e9:.2f} GB of safetensors")


if __name__ == "__main__":
    main()
