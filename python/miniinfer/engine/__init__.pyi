from .llm_engine import LLMEngine as LLMEngine

__all__: list[str]
