"""vLLM's offline API over LLMEngine: a vLLM script runs by changing its import to
``from miniinfer import LLM, SamplingParams``.

    llm = LLM(model="/path/to/Qwen3-0.6B")
    for out in llm.generate(["Hello"], SamplingParams(temperature=0.8, max_tokens=64)):
        print(out.prompt, out.outputs[0].text)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Union

from .engine.llm_engine import LLMEngine, Params, Prompt, _is_chat, _prompt_list
from .tokenizer import Tokenizer
from .utils import SamplingParams

# vLLM's LLM arguments that MiniInfer has no use for, with the values it accepts (None: any).
_VLLM_ONLY_ARGS: Dict[str, Optional[tuple]] = {
    "tokenizer": None,            # must be the model directory (checked below)
    "tokenizer_mode": ("auto",),
    "trust_remote_code": None,
    "dtype": ("auto", "bfloat16", "bf16"),
    "pipeline_parallel_size": (1,),
    "quantization": (None,),
    "swap_space": None,
    "cpu_offload_gb": (0,),
    "disable_log_stats": None,
    "max_seq_len_to_capture": None,
    "disable_custom_all_reduce": None,
}


@dataclass
class Logprob:
    """One token's log-probability (vLLM's Logprob)."""
    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


@dataclass
class CompletionOutput:
    """One generated sequence (vLLM's CompletionOutput)."""
    index: int
    text: str
    token_ids: List[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[List[Dict[int, Logprob]]]
    finish_reason: Optional[str] = None
    stop_reason: Union[int, str, None] = None

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    """One prompt's result (vLLM's RequestOutput): ``out.outputs[0].text``."""
    request_id: str
    prompt: Optional[str]
    prompt_token_ids: List[int]
    outputs: List[CompletionOutput]
    finished: bool = True
    num_cached_tokens: int = 0
    prompt_logprobs: Optional[list] = None
    error: Optional[str] = None
    metrics: Optional[Any] = field(default=None, repr=False)


def _vllm_logprobs(entries: Optional[List[dict]]) -> Optional[List[Dict[int, Logprob]]]:
    """Our [{"id", "logprob", "top": [...]}] as vLLM's [{token_id: Logprob}] (sampled first)."""
    if entries is None:
        return None
    result = []
    for e in entries:
        d = {t["id"]: Logprob(t["logprob"], rank=r + 1) for r, t in enumerate(e["top"])}
        d.setdefault(e["id"], Logprob(e["logprob"]))
        result.append(d)
    return result


def _completion(index: int, r: Dict[str, Any], params: Optional[SamplingParams]) -> CompletionOutput:
    stop_reason: Union[int, str, None] = r["stop_reason"]
    # vLLM reports a stop token as its id (an int) and a stop string as itself.
    if (params is not None and isinstance(stop_reason, str) and stop_reason.isdigit() and
            int(stop_reason) in params.stop_token_ids and stop_reason not in params.stop):
        stop_reason = int(stop_reason)
    logprobs = r["logprobs"]
    return CompletionOutput(
        index=index, text=r["text"], token_ids=r["token_ids"],
        cumulative_logprob=sum(e["logprob"] for e in logprobs) if logprobs is not None else None,
        logprobs=_vllm_logprobs(logprobs), finish_reason=r["finish_reason"],
        stop_reason=stop_reason)


def _request_output(results: List[Dict[str, Any]], params: Optional[SamplingParams]) -> RequestOutput:
    """One prompt's n results (its completions, in order) as vLLM's RequestOutput."""
    first = results[0]
    errors = [r["error"] for r in results if r.get("error")]
    return RequestOutput(request_id=first["request_id"], prompt=first["prompt"],
                         prompt_token_ids=first["prompt_token_ids"],
                         outputs=[_completion(i, r, params) for i, r in enumerate(results)],
                         num_cached_tokens=first["num_cached_tokens"],
                         error=errors[0] if errors else None)


def _copies(params: Optional[SamplingParams]) -> List[Optional[SamplingParams]]:
    """n requests for one prompt: n = 1 each, seeds seed, seed + 1, ... (as the OpenAI server
    seeds its choices); without a seed each draws its own."""
    if params is None or params.n == 1:
        return [params]
    copies = []
    for i in range(params.n):
        p = params.clone()
        p.n = 1
        if params.seed is not None:
            p.seed = params.seed + i
        copies.append(p)
    return copies


class LLM:
    """vLLM's ``LLM`` for offline batches, on MiniInfer's engine.

    Args:
        model: a Hugging Face model directory.
        **kwargs: LLMEngine's options (max_num_seqs, max_model_len, gpu_memory_utilization,
            enforce_eager, seed, ...). vLLM arguments MiniInfer does not need (dtype="auto",
            tensor_parallel_size=1, trust_remote_code, ...) are accepted with their default
            values; anything else raises TypeError naming it.
    """

    def __init__(self, model: str, **kwargs: Any) -> None:
        engine_kwargs = {}
        for key, value in kwargs.items():
            if key not in _VLLM_ONLY_ARGS:
                engine_kwargs[key] = value
                continue
            accepted = _VLLM_ONLY_ARGS[key]
            if key == "tokenizer" and value not in (None, model):
                raise ValueError("tokenizer: MiniInfer uses the model directory's tokenizer.json")
            if accepted is not None and value not in accepted:
                raise ValueError(f"{key}={value!r} is not supported (only {accepted})")
        if engine_kwargs.get("seed") is None:
            engine_kwargs.pop("seed", None)
        self.llm_engine = LLMEngine(model, **engine_kwargs)

    def generate(self, prompts: Union[Prompt, Sequence[Prompt]],
                 sampling_params: Params = None, use_tqdm: bool = True,
                 **kwargs: Any) -> List[RequestOutput]:
        """Completes every prompt (strings, token-id lists, {"prompt": ...} or
        {"prompt_token_ids": [...]} dicts); one RequestOutput per prompt, in order."""
        if kwargs:
            raise TypeError(f"generate() got unexpected keyword arguments: {sorted(kwargs)}")
        return self._generate(_prompt_list(prompts), sampling_params, use_tqdm)

    def chat(self, messages: Union[List[Dict[str, Any]], List[List[Dict[str, Any]]]],
             sampling_params: Params = None, use_tqdm: bool = True,
             chat_template_kwargs: Optional[Dict[str, Any]] = None,
             add_generation_prompt: bool = True) -> List[RequestOutput]:
        """Answers one conversation (a list of messages) or many, through the chat template."""
        chats = [messages] if _is_chat(messages) else list(messages)
        tokenizer = self.get_tokenizer()
        prompts = [tokenizer.apply_chat_template(list(c), add_generation_prompt=add_generation_prompt,
                                                 tokenize=False, **(chat_template_kwargs or {}))
                   for c in chats]
        return self._generate(prompts, sampling_params, use_tqdm)

    def _generate(self, prompts: List[Any], sampling_params: Params,
                  use_tqdm: bool) -> List[RequestOutput]:
        """Every prompt's n completions as n requests of one batch, regrouped per prompt."""
        params = self.llm_engine._params_list(sampling_params, len(prompts))
        copies = [_copies(p) for p in params]
        flat_prompts = [prompt for prompt, c in zip(prompts, copies) for _ in c]
        flat_params = [p for c in copies for p in c]
        if all(p is None for p in flat_params):
            results = self.llm_engine.generate(flat_prompts, None, use_tqdm=use_tqdm)
        else:
            defaults = self.llm_engine.get_default_sampling_params()
            results = self.llm_engine.generate(
                flat_prompts, [p if p is not None else defaults for p in flat_params],
                use_tqdm=use_tqdm)
        out, at = [], 0
        for p, c in zip(params, copies):
            out.append(_request_output(results[at:at + len(c)], p))
            at += len(c)
        return out

    def get_tokenizer(self) -> Tokenizer:
        if self.llm_engine.tokenizer is None:
            raise ValueError("this model has no tokenizer.json")
        return self.llm_engine.tokenizer

    def get_default_sampling_params(self) -> SamplingParams:
        return self.llm_engine.get_default_sampling_params()

    def close(self) -> None:
        """Frees the engine (vLLM has no such call; the engine is also freed with the object)."""
        self.llm_engine.close()

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["LLM", "RequestOutput", "CompletionOutput", "Logprob"]
