import os
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Union

from ..tokenizer import Tokenizer
from ..utils import SamplingParams

Prompt = Union[str, List[int], List[Dict[str, Any]], Dict[str, Any]]
Params = Union[None, SamplingParams, Sequence[SamplingParams]]

def engine_options() -> Dict[str, Any]: ...

class LLMEngine:
    """MiniInfer's engine with the original Python MiniInfer API."""
    tokenizer: Optional[Tokenizer]
    def __init__(self, model: Union[str, os.PathLike[str]], *, max_num_seqs: int = ...,
                 max_model_len: int = ..., max_num_batched_tokens: int = ...,
                 gpu_memory_utilization: float = ..., enable_prefix_caching: bool = ...,
                 enforce_eager: bool = ..., piecewise_max_tokens: int = ...,
                 attention_backend: str = ..., device: str = ...,
                 load_format: str = ..., seed: int = ..., use_multiprocess: bool = ...,
                 page_size: int = ..., kv_cache_bytes: int = ..., num_pages: int = ...,
                 kv_cache_dtype: str = ...,
                 tensor_parallel_size: int = ..., enable_expert_parallel: bool = ...,
                 nnodes: int = ..., node_rank: int = ..., master_addr: str = ...,
                 master_port: int = ...,
                 disable_overlap: bool = ..., generation_config: str = ...,
                 revision: str = ..., **kwargs: Any) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> LLMEngine: ...
    def __exit__(self, *exc: Any) -> None: ...
    @property
    def config(self) -> Dict[str, Any]: ...
    @property
    def max_model_len(self) -> int: ...
    @property
    def overlapping(self) -> bool: ...
    def get_default_sampling_params(self) -> SamplingParams: ...
    def generate(self, prompts: Union[Prompt, Sequence[Prompt]], sampling_params: Params = None,
                 use_tqdm: bool = True,
                 chat_template_kwargs: Optional[Dict[str, Any]] = None) -> List[Dict[str, Any]]: ...
    def add_request(self, prompt: Prompt, sampling_params: Optional[SamplingParams] = None,
                    request_id: Optional[str] = None,
                    chat_template_kwargs: Optional[Dict[str, Any]] = None) -> str: ...
    def step(self) -> List[Dict[str, Any]]: ...
    def abort(self, request_id: Union[str, Iterable[str]]) -> None: ...
    def has_unfinished_requests(self) -> bool: ...
    def stream(self, prompt: Prompt, sampling_params: Optional[SamplingParams] = None,
               chat_template_kwargs: Optional[Dict[str, Any]] = None) -> Iterator[Dict[str, Any]]: ...

__all__: list[str]
