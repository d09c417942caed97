from typing import Any, Dict, List, Optional, Union

class SamplingParams:
    """vLLM's SamplingParams; bad values raise ValueError naming the field."""
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    repetition_penalty: float
    presence_penalty: float
    frequency_penalty: float
    seed: Optional[int]
    max_tokens: Optional[int]
    min_tokens: int
    stop: List[str]
    stop_token_ids: List[int]
    ignore_eos: bool
    logprobs: Optional[int]
    skip_special_tokens: bool
    n: int
    best_of: Optional[int]
    prompt_logprobs: Optional[int]
    include_stop_str_in_output: bool
    detokenize: bool
    spaces_between_special_tokens: bool
    logit_bias: Optional[Dict[int, float]]
    allowed_token_ids: Optional[List[int]]
    bad_words: Optional[List[str]]
    truncate_prompt_tokens: Optional[int]
    structured_outputs: Optional[Any]
    guided_decoding: Optional[Any]
    logits_processors: Optional[Any]
    extra_args: Optional[Dict[str, Any]]
    def __init__(self, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                 min_p: float = 0.0, repetition_penalty: float = 1.0,
                 presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
                 seed: Optional[int] = None, max_tokens: Optional[int] = 16, min_tokens: int = 0,
                 stop: Optional[Union[str, List[str]]] = None,
                 stop_token_ids: Optional[List[int]] = None, ignore_eos: bool = False,
                 logprobs: Optional[int] = None, skip_special_tokens: bool = True, n: int = 1,
                 best_of: Optional[int] = None, prompt_logprobs: Optional[int] = None,
                 include_stop_str_in_output: bool = False, detokenize: bool = True,
                 spaces_between_special_tokens: bool = True,
                 logit_bias: Optional[Dict[int, float]] = None,
                 allowed_token_ids: Optional[List[int]] = None,
                 bad_words: Optional[List[str]] = None,
                 truncate_prompt_tokens: Optional[int] = None,
                 structured_outputs: Optional[Any] = None, guided_decoding: Optional[Any] = None,
                 logits_processors: Optional[Any] = None,
                 extra_args: Optional[Dict[str, Any]] = None) -> None: ...
    def validate(self) -> None: ...
    def to_engine_dict(self, max_model_len: int) -> dict: ...
    def clone(self) -> SamplingParams: ...
    @classmethod
    def from_engine_dict(cls, d: dict) -> SamplingParams: ...

__all__: list[str]
