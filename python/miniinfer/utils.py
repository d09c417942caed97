"""SamplingParams: how one request is sampled and when it stops, with vLLM's names and defaults.

Validation is the engine's own (the request-field table, SamplingParams::from_json and
validate in C++, through the C API), so Python and the server cannot disagree on what is
allowed: a bad value, or a vLLM field MiniInfer does not implement, raises ValueError naming
the field.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Union

from . import _lib

# The fields the engine reads (SamplingParams::from_json); the others are vLLM's, and the
# engine's request-field table says which of their values it accepts.
_ENGINE_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                  "presence_penalty", "frequency_penalty", "seed", "max_tokens", "min_tokens",
                  "stop", "stop_token_ids", "ignore_eos", "logprobs", "skip_special_tokens",
                  "include_stop_str_in_output", "logit_bias", "allowed_token_ids", "bad_words",
                  "truncate_prompt_tokens", "structured_outputs")
_PYTHON_FIELDS = ("n",)  # handled here (LLM.generate fans a prompt out)


def _as_json(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


@dataclass
class SamplingParams:
    """Sampling parameters for one request (vLLM's ``SamplingParams``).

    Args:
        temperature: 0 is greedy; higher is more random (>= 0).
        top_p: keep the smallest set of tokens whose probability reaches top_p, in (0, 1].
        top_k: keep the k most likely tokens; 0 or -1 keeps all.
        min_p: drop tokens below min_p times the most likely one's probability, in [0, 1].
        repetition_penalty: > 1 discourages tokens seen in the prompt or output (> 0).
        presence_penalty: [-2, 2], on tokens already generated (OpenAI's).
        frequency_penalty: [-2, 2], by how often a token was generated (OpenAI's).
        seed: the request's random seed (same seed, same tokens, whatever the batch); None
            draws one from the engine's seed.
        max_tokens: most tokens to generate (>= 1); None: up to the engine's max_model_len
            (the prompt included).
        min_tokens: fewest tokens before EOS or a stop token may end the request.
        stop: strings that end the output (not included in it).
        stop_token_ids: token ids that end the output (included in token_ids).
        ignore_eos: keep generating past EOS.
        logprobs: return the log-probability of each sampled token and of the top-n, 0..20.
        skip_special_tokens: leave special tokens out of the text.
        n: completions per prompt, 1..128 (``LLM.generate``, vLLM's API: seeds seed, seed + 1,
            ... when a seed is given, as the OpenAI server does; ``LLMEngine`` takes 1 only).
        include_stop_str_in_output: keep the stop string that ended the text in it.
        logit_bias: {token id: bias in [-100, 100]}, added to the logits before penalties.
        allowed_token_ids: only these tokens may be generated.
        bad_words: words never generated (their tokens, with and without a leading space).
        truncate_prompt_tokens: keep only the prompt's last k tokens (-1: max_model_len).
        structured_outputs: the output follows a constraint, vLLM's StructuredOutputsParams or
            a dict with exactly one of json (a schema), json_object (True), regex, grammar
            (GBNF), choice (a list of strings); ends with EOS (finish_reason "stop"). Its
            MiniInfer key reasoning_end (a token's text, e.g. "</think>") leaves the output
            free up to that token, as the server does for a thinking model.
        best_of, prompt_logprobs, detokenize, spaces_between_special_tokens,
            guided_decoding, logits_processors, extra_args: vLLM's; values MiniInfer does not
            implement raise ValueError (the engine's request-field table, as the server's).

    Raises:
        ValueError: a value out of range or of the wrong type, naming the field.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: Optional[int] = None
    max_tokens: Optional[int] = 16
    min_tokens: int = 0
    stop: Optional[Union[str, List[str]]] = None
    stop_token_ids: Optional[List[int]] = None
    ignore_eos: bool = False
    logprobs: Optional[int] = None
    skip_special_tokens: bool = True
    n: int = 1
    best_of: Optional[int] = None
    prompt_logprobs: Optional[int] = None
    include_stop_str_in_output: bool = False
    detokenize: bool = True
    spaces_between_special_tokens: bool = True
    logit_bias: Optional[Dict[int, float]] = None
    allowed_token_ids: Optional[List[int]] = None
    bad_words: Optional[List[str]] = None
    truncate_prompt_tokens: Optional[int] = None
    structured_outputs: Optional[Any] = None
    guided_decoding: Optional[Any] = None
    logits_processors: Optional[Any] = None
    extra_args: Optional[Dict[str, Any]] = None

    def __post_init__(self) -> None:
        if self.structured_outputs is not None and not isinstance(self.structured_outputs, dict):
            # vLLM's StructuredOutputsParams (or this package's): its set fields, as the JSON
            # the engine reads.
            self.structured_outputs = {k: v for k, v in vars(self.structured_outputs).items()
                                       if v is not None and v is not False and not k.startswith("_")}
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop) if self.stop is not None else []
        self.stop_token_ids = list(self.stop_token_ids) if self.stop_token_ids is not None else []
        self.validate()

    def validate(self) -> None:
        """Raises ValueError naming the first bad field (the engine's own rules)."""
        if isinstance(self.n, bool) or not isinstance(self.n, int) or not 1 <= self.n <= 128:
            raise ValueError(f"sampling params: 'n' must be an integer in [1, 128], got {self.n!r}")
        # JSON has no NaN or infinity, so the engine could not name the field: check here.
        for name in ("temperature", "top_p", "min_p", "repetition_penalty", "presence_penalty",
                     "frequency_penalty"):
            value = getattr(self, name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"sampling params: '{name}' must be finite, got {value}")
        if self.logit_bias is not None:
            self.logit_bias = {int(k): float(v) for k, v in self.logit_bias.items()}
        # A value JSON cannot carry (a callable logits processor) still reaches the table.
        fields = {f.name: _as_json(getattr(self, f.name)) for f in dataclasses.fields(self)
                  if f.name not in _PYTHON_FIELDS}
        fields["max_tokens"] = self.to_engine_dict(max_model_len=1 << 30)["max_tokens"]
        _lib.validate_sampling_params(fields)

    def to_engine_dict(self, max_model_len: int) -> dict:
        """The fields the engine reads, as its JSON; max_tokens None becomes max_model_len (the
        caller passes what is left of it after the prompt)."""
        d = {name: getattr(self, name) for name in _ENGINE_FIELDS
             if getattr(self, name) is not None or name in ("seed", "logprobs", "max_tokens")}
        if d["max_tokens"] is None:
            d["max_tokens"] = max(max_model_len, 1)
        return d

    def clone(self) -> "SamplingParams":
        return dataclasses.replace(self)

    @classmethod
    def from_engine_dict(cls, d: dict) -> "SamplingParams":
        """Built from the engine's JSON (e.g. its defaults from generation_config.json)."""
        return cls(**{k: v for k, v in d.items() if k in _ENGINE_FIELDS})


__all__ = ["SamplingParams"]
