"""MiniInfer: a C++/CUDA LLM inference engine, from Python.

    from miniinfer.engine.llm_engine import LLMEngine      # the original MiniInfer API
    from miniinfer.utils import SamplingParams
    from miniinfer import LLM, SamplingParams              # vLLM's offline API

The engine is libminiinfer_c.so (a C API, loaded with ctypes); see docs/ARCHITECTURE.md.
"""
from .engine.llm_engine import LLMEngine
from .llm import LLM, CompletionOutput, Logprob, RequestOutput
from .tokenizer import Tokenizer
from .utils import SamplingParams

__version__ = "0.1.0"
__all__ = ["LLM", "LLMEngine", "SamplingParams", "RequestOutput", "CompletionOutput", "Logprob",
           "Tokenizer"]
