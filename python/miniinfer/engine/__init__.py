"""The engine: ``from miniinfer.engine.llm_engine import LLMEngine``."""
from .llm_engine import LLMEngine

__all__ = ["LLMEngine"]
