from typing import Any, Dict, List, Optional, Sequence, Union

from .engine.llm_engine import LLMEngine, Params, Prompt
from .tokenizer import Tokenizer
from .utils import SamplingParams

class Logprob:
    logprob: float
    rank: Optional[int]
    decoded_token: Optional[str]
    def __init__(self, logprob: float, rank: Optional[int] = None,
                 decoded_token: Optional[str] = None) -> None: ...

class CompletionOutput:
    index: int
    text: str
    token_ids: List[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[List[Dict[int, Logprob]]]
    finish_reason: Optional[str]
    stop_reason: Union[int, str, None]
    def finished(self) -> bool: ...

class RequestOutput:
    request_id: str
    prompt: Optional[str]
    prompt_token_ids: List[int]
    outputs: List[CompletionOutput]
    finished: bool
    num_cached_tokens: int
    prompt_logprobs: Optional[list]
    error: Optional[str]
    metrics: Optional[Any]

class LLM:
    """vLLM's offline LLM on MiniInfer's engine."""
    llm_engine: LLMEngine
    def __init__(self, model: str, **kwargs: Any) -> None: ...
    def generate(self, prompts: Union[Prompt, Sequence[Prompt]], sampling_params: Params = None,
                 use_tqdm: bool = True, **kwargs: Any) -> List[RequestOutput]: ...
    def chat(self, messages: Union[List[Dict[str, Any]], List[List[Dict[str, Any]]]],
             sampling_params: Params = None, use_tqdm: bool = True,
             chat_template_kwargs: Optional[Dict[str, Any]] = None,
             add_generation_prompt: bool = True) -> List[RequestOutput]: ...
    def get_tokenizer(self) -> Tokenizer: ...
    def get_default_sampling_params(self) -> SamplingParams: ...
    def close(self) -> None: ...
    def __enter__(self) -> LLM: ...
    def __exit__(self, *exc: Any) -> None: ...

__all__: list[str]
