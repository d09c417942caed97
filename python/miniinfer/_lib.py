"""Loads libminiinfer_c.so (the C API, src/capi/miniinfer_c.h) with ctypes and wraps its calls.

Every call crosses as JSON text; ctypes releases the GIL for the whole of each call, so the
engine works while other Python threads run. A C-side failure arrives as "ValueError: ..." or
"RuntimeError: ..." and is raised here as that exception.
"""
from __future__ import annotations

import array
import ctypes
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

_PACKAGE_DIR = Path(__file__).resolve().parent
_LIB_NAME = "libminiinfer_c.so"


def _candidate_lib_paths() -> list[Path]:
    """Where the library may be: $MINIINFER_LIB, the installed package, a source tree's build."""
    paths = []
    if os.environ.get("MINIINFER_LIB"):
        paths.append(Path(os.environ["MINIINFER_LIB"]))
    paths.append(_PACKAGE_DIR / _LIB_NAME)
    # Running from a checkout (PYTHONPATH=python): the CMake build of -DMINIINFER_C_API=ON.
    repo = _PACKAGE_DIR.parent.parent
    build_dirs = [os.environ["MINIINFER_BUILD_DIR"]] if os.environ.get("MINIINFER_BUILD_DIR") else []
    build_dirs.append(repo / "build")
    paths += [Path(d) / "src" / "capi" / _LIB_NAME for d in build_dirs]
    return paths


@lru_cache(maxsize=None)
def lib_path() -> Path:
    for path in _candidate_lib_paths():
        if path.is_file():
            return path
    tried = ", ".join(str(p) for p in _candidate_lib_paths())
    raise ImportError(f"miniinfer: {_LIB_NAME} not found (tried {tried}); install the package "
                      f"with `pip install .` or build with -DMINIINFER_C_API=ON")


def binary_path() -> Path:
    """The `miniinfer` executable beside the library: the CLI, and the pipeline's children."""
    if os.environ.get("MINIINFER_BIN"):
        return Path(os.environ["MINIINFER_BIN"])
    lib_dir = lib_path().parent
    for path in (lib_dir / "bin" / "miniinfer", lib_dir.parent / "apps" / "miniinfer"):
        if path.is_file():
            return path
    raise FileNotFoundError(f"miniinfer: the miniinfer binary is not beside {lib_path()}")


_char_pp = ctypes.POINTER(ctypes.c_void_p)
_SIGNATURES = {
    # name: (restype, argtypes)
    "mi_version": (ctypes.c_char_p, []),
    "mi_has_cuda": (ctypes.c_int, []),
    "mi_free_string": (None, [ctypes.c_void_p]),
    "mi_engine_config_defaults": (ctypes.c_void_p, []),
    "mi_engine_create": (ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_char_p, _char_pp]),
    "mi_engine_destroy": (None, [ctypes.c_void_p]),
    "mi_engine_info": (ctypes.c_void_p, [ctypes.c_void_p, _char_pp]),
    "mi_engine_add_requests": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p,
                                              ctypes.c_int64, ctypes.POINTER(ctypes.c_int64),
                                              _char_pp]),
    "mi_engine_step": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_double, _char_pp]),
    "mi_engine_run": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_double,
                                        ctypes.POINTER(ctypes.c_void_p),
                                        ctypes.POINTER(ctypes.c_int64), _char_pp]),
    "mi_engine_abort": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, _char_pp]),
    "mi_engine_has_unfinished": (ctypes.c_int, [ctypes.c_void_p]),
    "mi_tokenize": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, _char_pp]),
    "mi_detokenize": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, _char_pp]),
    "mi_apply_chat_template": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p,
                                                 ctypes.c_char_p, _char_pp]),
    "mi_sampling_params_validate": (ctypes.c_int, [ctypes.c_char_p, _char_pp]),
    "mi_bench_workload": (ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_char_p, _char_pp]),
    "mi_engine_bench_sol_seconds": (ctypes.c_double, [ctypes.c_void_p, ctypes.c_char_p,
                                                      ctypes.c_double, ctypes.c_double, _char_pp]),
}


@lru_cache(maxsize=None)
def lib() -> ctypes.CDLL:
    # CDLL (not PyDLL): the GIL is released during every call.
    cdll = ctypes.CDLL(str(lib_path()))
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(cdll, name)
        fn.restype, fn.argtypes = restype, argtypes
    return cdll


def _take_string(ptr: int) -> str:
    """The text of a C string the library returned, which is then freed."""
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        lib().mi_free_string(ptr)


def _raise(error: ctypes.c_void_p) -> None:
    message = _take_string(error.value) if error.value else "RuntimeError: unknown failure"
    kind, _, text = message.partition(": ")
    raise (ValueError if kind == "ValueError" else RuntimeError)(text)


def call_string(name: str, *args: Any) -> str:
    """Calls a C function returning char* (freed here); its error is raised."""
    error = ctypes.c_void_p()
    ptr = getattr(lib(), name)(*args, ctypes.byref(error))
    if not ptr:
        _raise(error)
    return _take_string(ptr)


def call_json(name: str, *args: Any) -> Any:
    return json.loads(call_string(name, *args))


def call_status(name: str, *args: Any) -> None:
    """Calls a C function returning 0 / -1; -1 raises its error."""
    error = ctypes.c_void_p()
    if getattr(lib(), name)(*args, ctypes.byref(error)) != 0:
        _raise(error)


def encode(value: Any) -> bytes:
    """JSON text for the C side (non-ASCII kept as UTF-8)."""
    return json.dumps(value, ensure_ascii=False).encode("utf-8")


def engine_config_defaults() -> dict:
    return json.loads(_take_string(lib().mi_engine_config_defaults()))


def create_engine(config: dict, worker_binary: Optional[Path]) -> int:
    error = ctypes.c_void_p()
    binary = str(worker_binary).encode() if worker_binary else None
    handle = lib().mi_engine_create(encode(config), binary, ctypes.byref(error))
    if not handle:
        _raise(error)
    return handle


def add_requests(handle: int, requests: list) -> None:
    """Queues every request or none; a bad one raises ValueError("prompt N: ...").

    Token-id prompts travel as one int32 array (prompt_token_range) rather than JSON text:
    for a benchmark's batch that is milliseconds instead of tens of them."""
    tokens = array.array("i")
    for i, r in enumerate(requests):
        ids = r.pop("prompt_token_ids", None)
        if ids is not None:
            start = len(tokens)
            try:
                tokens.extend(array.array("i", ids))  # 5x faster than extending by a list
            except (TypeError, OverflowError):
                raise ValueError(f"prompt {i}: token ids must be 32-bit integers") from None
            r["prompt_token_range"] = [start, len(tokens) - start]
    buffer = (ctypes.c_int32 * len(tokens)).from_buffer(tokens) if tokens else None
    error = ctypes.c_void_p()
    failed = ctypes.c_int64(-1)
    if lib().mi_engine_add_requests(handle, encode(requests), buffer, len(tokens),
                                    ctypes.byref(failed), ctypes.byref(error)) != 0:
        try:
            _raise(error)
        except (ValueError, RuntimeError) as e:
            if failed.value >= 0:
                raise type(e)(f"prompt {failed.value}: {e}") from None
            raise


def run(handle: int, max_seconds: float) -> list:
    """mi_engine_run: the requests that finished within max_seconds, with token_ids and
    prompt_token_ids as lists again."""
    error = ctypes.c_void_p()
    tokens_ptr, num_tokens = ctypes.c_void_p(), ctypes.c_int64(0)
    ptr = lib().mi_engine_run(handle, max_seconds, ctypes.byref(tokens_ptr),
                              ctypes.byref(num_tokens), ctypes.byref(error))
    if not ptr:
        _raise(error)
    outputs = json.loads(_take_string(ptr))
    tokens = array.array("i")
    if tokens_ptr.value:
        try:
            tokens.frombytes(ctypes.string_at(tokens_ptr.value, num_tokens.value * 4))
        finally:
            lib().mi_free_string(tokens_ptr.value)
    for out in outputs:
        for key in ("token", "prompt_token"):
            offset, length = out.pop(key + "_range")
            out[key + "_ids"] = tokens[offset:offset + length].tolist()
    return outputs


def validate_sampling_params(params: dict) -> None:
    call_status("mi_sampling_params_validate", encode(params))


def has_cuda() -> bool:
    return bool(lib().mi_has_cuda())


def version() -> str:
    return lib().mi_version().decode()


def bench_sol_seconds(handle: int, workload: dict, hbm_bytes_per_s: float,
                      matmul_flops: float) -> float:
    error = ctypes.c_void_p()
    seconds = lib().mi_engine_bench_sol_seconds(handle, encode(workload), hbm_bytes_per_s,
                                                matmul_flops, ctypes.byref(error))
    if seconds < 0:
        _raise(error)
    return seconds
