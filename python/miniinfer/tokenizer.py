"""The model's tokenizer (tokenizer.json) and chat template, as the engine uses them."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Union

from . import _lib


class Tokenizer:
    """Encodes and decodes exactly as Hugging Face's ``tokenizers`` would, and renders the
    chat template as ``apply_chat_template`` does. Obtained as ``engine.tokenizer``; valid
    until the engine is closed."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        """Token ids of ``text`` (special tokens written in the text are parsed as such)."""
        with self._engine._lock:
            return _lib.call_json("mi_tokenize", self._engine._live_handle(),
                                  text.encode("utf-8"), int(add_special_tokens))

    def decode(self, token_ids: List[int], skip_special_tokens: bool = False) -> str:
        """The text of ``token_ids`` (unknown ids are skipped)."""
        with self._engine._lock:
            return _lib.call_string("mi_detokenize", self._engine._live_handle(),
                                    _lib.encode(list(token_ids)), int(skip_special_tokens))

    def apply_chat_template(self, messages: List[Dict[str, Any]],
                            tools: Optional[List[Dict[str, Any]]] = None,
                            add_generation_prompt: bool = False, tokenize: bool = True,
                            **kwargs: Any) -> Union[str, List[int]]:
        """Renders a chat (``[{"role": ..., "content": ...}, ...]``) with the model's template.

        Like Hugging Face's: returns token ids unless ``tokenize=False``; extra keyword
        arguments (``enable_thinking=False`` for Qwen3) are the template's variables.
        """
        options = {"tools": tools, "add_generation_prompt": add_generation_prompt,
                   "chat_template_kwargs": kwargs}
        with self._engine._lock:
            text = _lib.call_string("mi_apply_chat_template", self._engine._live_handle(),
                                    _lib.encode(messages), _lib.encode(options))
        return self.encode(text, add_special_tokens=False) if tokenize else text

    @property
    def vocab_size(self) -> int:
        """The model's vocabulary size (config.json's)."""
        return int(self._engine._info["vocab_size"])

    @property
    def eos_token_ids(self) -> List[int]:
        """The ids that end a request (one-process engines; empty for the pipeline)."""
        return list(self._engine._info["eos_token_ids"])

    def __call__(self, text: str, add_special_tokens: bool = True) -> Dict[str, List[int]]:
        """``{"input_ids": encode(text)}``, as a Hugging Face tokenizer call returns."""
        return {"input_ids": self.encode(text, add_special_tokens)}


__all__ = ["Tokenizer"]
