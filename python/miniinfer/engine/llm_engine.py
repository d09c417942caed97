"""LLMEngine: the C++ engine (one process, or the multi-process pipeline) from Python.

    with LLMEngine(model="/path/to/Qwen3-0.6B", max_num_seqs=256) as engine:
        outputs = engine.generate(["Hello"], SamplingParams(max_tokens=64))
        print(outputs[0]["text"])

generate() adds the whole batch in one call and lets the C++ side step it (mi_engine_run)
with the GIL released; Python wakes every _POLL_SECONDS for the progress bar and Ctrl-C.
Streaming: add_request / step / abort, or stream(prompt, params).
"""
from __future__ import annotations

import itertools
import os
import threading
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from .. import _lib
from .._progress import Progress
from ..tokenizer import Tokenizer
from ..utils import SamplingParams

# How long one mi_engine_run call may step before Python looks at Ctrl-C and the progress bar.
_POLL_SECONDS = 0.1
# Multi-process step(): how long to wait for the first output.
_STEP_TIMEOUT_SECONDS = 0.05
# EngineConfig fields Python does not offer: model_dir is `model`; detokenize=false is the
# pipeline's internal engine core.
_HIDDEN_OPTIONS = {"model_dir", "detokenize"}

Prompt = Union[str, List[int], List[Dict[str, Any]], Dict[str, Any]]
Params = Union[None, SamplingParams, Sequence[SamplingParams]]


def engine_options() -> Dict[str, Any]:
    """Every keyword LLMEngine accepts, with its default: the C++ EngineConfig's fields, and
    ``revision`` for a model given by Hugging Face name."""
    options = {k: v for k, v in _lib.engine_config_defaults().items() if k not in _HIDDEN_OPTIONS}
    options["revision"] = "main"
    return options


def _is_chat(prompt: Any) -> bool:
    return (isinstance(prompt, (list, tuple)) and len(prompt) > 0 and
            all(isinstance(m, dict) and "role" in m for m in prompt))


def _is_token_ids(prompt: Any) -> bool:
    # The first element decides (checking all would cost ~10 ms for a benchmark's batch); the
    # int32 packing in _lib.add_requests rejects anything else.
    return isinstance(prompt, (list, tuple)) and (
        len(prompt) == 0 or (isinstance(prompt[0], int) and not isinstance(prompt[0], bool)))


def _prompt_list(prompts: Any) -> List[Prompt]:
    """One prompt (a string, token ids, a chat, a dict) or a list of them -> a list."""
    if isinstance(prompts, (str, dict)) or _is_chat(prompts):
        return [prompts]
    if _is_token_ids(prompts) and len(prompts) > 0:
        return [list(prompts)]
    return list(prompts)


class LLMEngine:
    """MiniInfer's engine with the original Python MiniInfer API.

    Args:
        model: a Hugging Face model directory (config.json, *.safetensors, tokenizer.json), or
            a Hugging Face name (org/name) found in its cache or downloaded, as on the CLI.
        **kwargs: engine options with vLLM's names: max_num_seqs, max_model_len,
            max_num_batched_tokens, gpu_memory_utilization, enable_prefix_caching,
            enforce_eager, attention_backend (auto | fa2 | flashinfer), device (cpu | cuda),
            load_format (auto | safetensors | dummy), seed, use_multiprocess, page_size,
            kv_cache_bytes, num_pages, tensor_parallel_size, enable_expert_parallel,
            disable_overlap, generation_config (auto | vllm | a folder), kv_cache_dtype
            (auto | fp8), nnodes, node_rank, master_addr, master_port, revision (with a
            name). ``engine_options()`` lists them all with their defaults.

    Raises:
        TypeError: an unknown keyword (named).
        ValueError: a bad option value or an unusable model directory (named).

    One thread drives the engine at a time (calls from several threads are serialised).
    ``close()`` (or leaving a ``with`` block) frees the model and KV cache and stops the
    pipeline's processes; with use_multiprocess, create the engine on a thread that outlives
    it (the children stop when the thread that started them ends).
    """

    def __init__(self, model: Union[str, "os.PathLike[str]"], **kwargs: Any) -> None:
        self._handle: Optional[int] = None  # first: __del__ runs even if loading fails
        self._lock = threading.RLock()
        options = engine_options()
        for key in kwargs:
            if key not in options:
                raise TypeError(f"LLMEngine got an unexpected keyword argument '{key}' "
                                f"(engine options: {', '.join(sorted(options))})")
        config = {**_lib.engine_config_defaults(), **kwargs, "model_dir": os.fspath(model)}
        worker = _lib.binary_path() if config["use_multiprocess"] is True else None
        self._handle = _lib.create_engine(config, worker)
        self._info: Dict[str, Any] = _lib.call_json("mi_engine_info", self._handle)
        self.tokenizer: Optional[Tokenizer] = (
            Tokenizer(self) if self._info["has_tokenizer"] else None)
        self._ids = itertools.count()
        self._streams: set = set()  # ids added by add_request whose final output is not out
        self._stash: Dict[str, List[dict]] = {}  # outputs read by one stream() for another

    # --- lifetime ---------------------------------------------------------------------------

    def close(self) -> None:
        """Frees the model, the KV cache (GPU memory) and stops child processes. Idempotent."""
        with self._lock:
            handle, self._handle = self._handle, None
            if handle:
                _lib.lib().mi_engine_destroy(handle)
            self._streams.clear()
            self._stash.clear()

    def __enter__(self) -> "LLMEngine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def _live_handle(self) -> int:
        if not self._handle:
            raise RuntimeError("the engine is closed")
        return self._handle

    # --- what the engine resolved -----------------------------------------------------------

    @property
    def config(self) -> Dict[str, Any]:
        """The engine options as resolved (max_model_len, max_num_batched_tokens filled in)."""
        return dict(self._info["config"])

    @property
    def max_model_len(self) -> int:
        return int(self._info["max_model_len"])

    @property
    def overlapping(self) -> bool:
        """The engine overlaps a step's output processing with the next step (one process)."""
        return bool(self._info["overlap"])

    def get_default_sampling_params(self) -> SamplingParams:
        """The model's defaults (generation_config.json on top of vLLM's): what
        ``sampling_params=None`` uses."""
        return SamplingParams.from_engine_dict(self._info["default_sampling_params"])

    # --- batch generation -------------------------------------------------------------------

    def generate(self, prompts: Union[Prompt, Sequence[Prompt]], sampling_params: Params = None,
                 use_tqdm: bool = True,
                 chat_template_kwargs: Optional[Dict[str, Any]] = None) -> List[Dict[str, Any]]:
        """Runs every prompt to completion and returns one dict per prompt, in order.

        Args:
            prompts: a list of prompts (or one). A prompt is a string, a list of token ids, a
                chat (a list of ``{"role", "content"}`` messages, rendered with the model's
                chat template and a generation prompt), or ``{"prompt": str}`` /
                ``{"prompt_token_ids": [...]}``.
            sampling_params: one SamplingParams for all, one per prompt, or None for the
                model's defaults (``get_default_sampling_params()``).
            use_tqdm: show a progress bar (tqdm if installed, else a line on stderr).
            chat_template_kwargs: the chat template's variables, e.g. ``{"enable_thinking":
                False}`` for Qwen3.

        Returns:
            dicts with the fields of ``miniinfer generate``'s JSON lines: text, token_ids,
            finish_reason ("stop", "length", "abort", "error"), stop_reason, num_prompt_tokens,
            num_cached_tokens, logprobs (None unless asked for: one ``{"id", "logprob", "top":
            [{"id", "logprob"}]}`` per token); also request_id, prompt, prompt_token_ids, and
            "error" when finish_reason is "error".

        Raises:
            ValueError: a bad prompt or parameter ("prompt N: ..."); nothing is run then.
            KeyboardInterrupt: Ctrl-C aborts the whole batch; the engine stays usable.
        """
        with self._lock:
            handle = self._live_handle()
            if self._streams:
                raise RuntimeError("generate() while streamed requests are open: step() them "
                                   "to their end or abort() them first")
            prompt_list = _prompt_list(prompts)
            params = self._params_list(sampling_params, len(prompt_list))
            requests, echoes = [], []
            for prompt, p in zip(prompt_list, params):
                request, echo = self._request(prompt, p, str(next(self._ids)),
                                              chat_template_kwargs)
                requests.append(request)
                echoes.append(echo)
            return self._run_to_completion(handle, requests, echoes, params, use_tqdm)

    def _run_to_completion(self, handle: int, requests: List[dict], echoes: List[Optional[str]],
                           params: List[Optional[SamplingParams]],
                           use_tqdm: bool) -> List[Dict[str, Any]]:
        pending = {r["request_id"]: i for i, r in enumerate(requests)}
        results: List[Any] = [None] * len(requests)
        progress = None
        try:
            _lib.add_requests(handle, requests)  # inside the try: a Ctrl-C may land just after
            progress = Progress(len(requests), use_tqdm)
            while pending:
                outputs = _lib.run(handle, _POLL_SECONDS)
                num_tokens = 0
                for out in outputs:
                    i = pending.pop(out["request_id"], None)
                    if i is None:
                        continue
                    results[i] = self._result(out, echoes[i], params[i])
                    num_tokens += len(out["token_ids"])
                progress.update(len(outputs), num_tokens)
                if pending and not outputs and not _lib.lib().mi_engine_has_unfinished(handle):
                    raise RuntimeError(f"the engine stopped with {len(pending)} requests open")
        except BaseException:  # Ctrl-C (KeyboardInterrupt) included: end the batch, then raise
            if pending and self._handle:  # ids that were never queued are ignored
                _lib.call_status("mi_engine_abort", handle, _lib.encode(list(pending)))
            raise
        finally:
            if progress is not None:
                progress.close()
        return results

    def _result(self, out: dict, echo: Optional[str],
                params: Optional[SamplingParams]) -> Dict[str, Any]:
        wants_logprobs = (params.logprobs if params is not None else
                          self._info["default_sampling_params"]["logprobs"]) is not None
        result = {
            "request_id": out["request_id"],
            "prompt": echo,
            "prompt_token_ids": out["prompt_token_ids"],
            "text": out["text"],
            "token_ids": out["token_ids"],
            "finish_reason": out["finish_reason"],
            "stop_reason": out["stop_reason"],
            "num_prompt_tokens": out["num_prompt_tokens"],
            "num_cached_tokens": out["num_cached_tokens"],
            "logprobs": out.get("logprobs", []) if wants_logprobs else None,
        }
        if out["error"]:
            result["error"] = out["error"]
        return result

    def _params_list(self, sampling_params: Params, n: int) -> List[Optional[SamplingParams]]:
        if sampling_params is None or isinstance(sampling_params, SamplingParams):
            return [sampling_params] * n
        params = list(sampling_params)
        if len(params) != n:
            raise ValueError(f"{len(params)} sampling params for {n} prompts: give one, or one "
                             f"per prompt")
        for p in params:
            if not isinstance(p, SamplingParams):
                raise TypeError(f"sampling_params: expected SamplingParams, got {type(p).__name__}")
        return params

    def _request(self, prompt: Prompt, params: Optional[SamplingParams], request_id: str,
                 chat_template_kwargs: Optional[Dict[str, Any]]) -> Tuple[dict, Optional[str]]:
        """The C API's request object for one prompt, and the prompt text to echo back."""
        request: Dict[str, Any] = {"request_id": request_id}
        if isinstance(prompt, str):
            request["prompt"] = echo = prompt
        elif isinstance(prompt, dict):
            if "prompt_token_ids" in prompt:
                request["prompt_token_ids"], echo = prompt["prompt_token_ids"], None
            elif "prompt" in prompt:
                request["prompt"] = echo = prompt["prompt"]
            else:
                raise ValueError("a prompt dict needs 'prompt' or 'prompt_token_ids'")
        elif _is_chat(prompt):
            if self.tokenizer is None:
                raise ValueError("this model has no tokenizer: chats cannot be rendered")
            request["prompt"] = echo = self.tokenizer.apply_chat_template(
                list(prompt), add_generation_prompt=True, tokenize=False,
                **(chat_template_kwargs or {}))
        elif _is_token_ids(prompt):
            request["prompt_token_ids"], echo = prompt, None
        else:
            raise TypeError(f"a prompt is a string, a list of token ids, a chat (list of "
                            f"messages) or a dict; got {type(prompt).__name__}")
        if params is not None and params.n != 1:
            raise ValueError(f"sampling params: 'n' = {params.n}: LLMEngine makes one completion "
                             f"per request; miniinfer.LLM (vLLM's API) makes n")
        if params is not None:
            room = self.max_model_len
            if params.max_tokens is None:  # as vLLM: whatever the context has left
                if "prompt" in request:
                    if self.tokenizer is None:
                        raise ValueError("this model has no tokenizer: text prompts need one")
                    request["prompt_token_ids"] = self.tokenizer.encode(request.pop("prompt"))
                room -= len(request["prompt_token_ids"])
            request["params"] = params.to_engine_dict(room)
        return request, echo

    # --- streaming --------------------------------------------------------------------------

    def add_request(self, prompt: Prompt, sampling_params: Optional[SamplingParams] = None,
                    request_id: Optional[str] = None,
                    chat_template_kwargs: Optional[Dict[str, Any]] = None) -> str:
        """Queues one request and returns its id; step() then yields its deltas.
        Raises ValueError for a bad prompt or parameter (nothing is queued)."""
        with self._lock:
            handle = self._live_handle()
            rid = request_id if request_id is not None else str(next(self._ids))
            request, _ = self._request(prompt, sampling_params, rid, chat_template_kwargs)
            try:
                _lib.add_requests(handle, [request])
            except ValueError as e:
                raise ValueError(str(e).removeprefix("prompt 0: ")) from None
            self._streams.add(rid)
            return rid

    def step(self) -> List[Dict[str, Any]]:
        """One engine step's outputs, as deltas: dicts with request_id, new_token_ids,
        delta_text, new_logprobs, num_output_tokens, finished, finish_reason, stop_reason,
        error, num_prompt_tokens, num_cached_tokens; a final output (finished) also carries
        the whole request: prompt_token_ids, token_ids, text, logprobs. With
        use_multiprocess: what arrived within a short wait (maybe nothing)."""
        with self._lock:
            outputs = [o for outs in self._stash.values() for o in outs]
            self._stash.clear()
            return outputs + self._step_outputs()

    def abort(self, request_id: Union[str, Iterable[str]]) -> None:
        """Ends requests (unknown ids are ignored); nothing more comes from them."""
        ids = [request_id] if isinstance(request_id, str) else list(request_id)
        with self._lock:
            _lib.call_status("mi_engine_abort", self._live_handle(), _lib.encode(ids))
            for rid in ids:
                self._streams.discard(rid)
                self._stash.pop(rid, None)

    def has_unfinished_requests(self) -> bool:
        """True while a request is open (step() has more to give)."""
        with self._lock:
            return bool(self._stash) or bool(
                _lib.lib().mi_engine_has_unfinished(self._live_handle()))

    def stream(self, prompt: Prompt, sampling_params: Optional[SamplingParams] = None,
               chat_template_kwargs: Optional[Dict[str, Any]] = None) -> Iterator[Dict[str, Any]]:
        """Adds a request and yields its deltas (as step() returns them) until its final one.
        Several streams may be read in turn; closing the generator early aborts its request."""
        rid = self.add_request(prompt, sampling_params, chat_template_kwargs=chat_template_kwargs)
        finished = False
        try:
            while not finished:
                for out in self._outputs_of(rid):
                    finished = finished or out["finished"]
                    yield out
        finally:
            if not finished and self._handle:
                self.abort(rid)

    def _outputs_of(self, rid: str) -> List[dict]:
        with self._lock:
            if rid in self._stash:
                return self._stash.pop(rid)
            mine = []
            for out in self._step_outputs():
                if out["request_id"] == rid:
                    mine.append(out)
                else:
                    self._stash.setdefault(out["request_id"], []).append(out)
            return mine

    def _step_outputs(self) -> List[dict]:
        outputs = _lib.call_json("mi_engine_step", self._live_handle(), _STEP_TIMEOUT_SECONDS)
        for out in outputs:
            out.setdefault("new_logprobs", None)
            if out["finished"]:
                out.setdefault("logprobs", None)
                self._streams.discard(out["request_id"])
        return outputs


__all__ = ["LLMEngine", "engine_options"]
