"""`miniinfer serve` with a hybrid Gated DeltaNet model (Qwen3.5's text form, random weights from
--load-format dummy, the demo's tokenizer), in both modes: chat and completions answer as for
Qwen3, and a conversation that resends its history is served from the prefix cache."""
import json
import os
import shutil
import urllib.request

import pytest

from conftest import DEMO, MODES, Server

CONFIG = {
    "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text", "vocab_size": 151936,
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 64,
    "layer_types": ["linear_attention"] * 3 + ["full_attention"],
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 32, "linear_num_key_heads": 2,
    "linear_num_value_heads": 4, "linear_value_head_dim": 32, "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "bos_token_id": 151643,
    "eos_token_id": 151645, "dtype": "bfloat16",
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0,
                        "partial_rotary_factor": 0.25},
}


@pytest.fixture(scope="module")
def hybrid_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("qwen3.5-dummy")
    (d / "config.json").write_text(json.dumps(CONFIG))
    for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(os.path.join(DEMO, f), d / f)
    return str(d)


def post(server, path, body):
    req = urllib.request.Request(server.url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


@pytest.mark.parametrize("mode", list(MODES))
def test_hybrid_chat_and_prefix_cache(hybrid_dir, mode):
    s = Server("--load-format", "dummy", *MODES[mode], model=hybrid_dir)
    try:
        with urllib.request.urlopen(s.url + "/v1/models", timeout=30) as r:
            model = json.loads(r.read())["data"][0]["id"]
        messages = [{"role": "system", "content": "You are a helpful assistant. " * 20},
                    {"role": "user", "content": [{"type": "text", "text": "Hello there!"}]}]
        first = post(s, "/v1/chat/completions", {"model": model, "messages": messages,
                                                 "max_tokens": 12, "temperature": 0})
        answer = first["choices"][0]["message"]
        assert first["usage"]["completion_tokens"] == 12
        messages += [{"role": "assistant", "content": answer["content"] or ""},
                     {"role": "user", "content": "And then?"}]
        second = post(s, "/v1/chat/completions", {"model": model, "messages": messages,
                                                  "max_tokens": 8, "temperature": 0})
        # The second turn resends the first: all of it from the cache but the last snapshot
        # interval (64 tokens).
        cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached >= first["usage"]["prompt_tokens"] - 64, second["usage"]
        done = post(s, "/v1/completions", {"model": model, "prompt": "The capital of France is",
                                           "max_tokens": 5, "temperature": 0})
        assert done["usage"]["completion_tokens"] == 5
    finally:
        assert s.stop() == 0, s.log()[-3000:]
