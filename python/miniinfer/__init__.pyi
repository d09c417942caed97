from .engine.llm_engine import LLMEngine as LLMEngine
from .llm import LLM as LLM, CompletionOutput as CompletionOutput, Logprob as Logprob, \
    RequestOutput as RequestOutput
from .tokenizer import Tokenizer as Tokenizer
from .utils import SamplingParams as SamplingParams

__version__: str
__all__: list[str]
