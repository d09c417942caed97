#!/usr/bin/env python3
"""The offline benchmark through the Python package (as the original MiniInfer's
benchmark/bench_miniinfer.py), printing the same table as `miniinfer bench`:

    python bench/bench_miniinfer.py --model DIR --device cuda --num-seqs 256

Run it from the repository root (bench/balanced.json) with the package installed
(`pip install .`) or PYTHONPATH=python over a -DMINIINFER_C_API=ON build.
"""
from miniinfer.bench import main

if __name__ == "__main__":
    main()
