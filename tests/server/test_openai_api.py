"""The server driven by the official `openai` client (from PyPI) and by curl."""
import json
import subprocess
import urllib.request

import openai
import pytest

from conftest import DEMO


def client(server, key="unused"):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)


def test_models_and_health(server):
    models = client(server).models.list()
    assert [m.id for m in models.data] == [DEMO]  # MODEL as given, as vLLM names it


def test_completion_and_its_stream_agree(server):
    c = client(server)
    full = c.completions.create(model=DEMO, prompt="Hello there", max_tokens=12, temperature=0)
    assert full.choices[0].finish_reason == "length"
    assert full.usage.completion_tokens == 12 and full.usage.prompt_tokens == 2
    chunks = list(c.completions.create(model=DEMO, prompt="Hello there", max_tokens=12, temperature=0,
                                       stream=True, stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    assert text == full.choices[0].text
    finals = [ch.choices[0].finish_reason for ch in chunks if ch.choices]
    assert finals[-1] == "length" and all(f is None for f in finals[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12


def test_chat_stream_shape_and_usage(server):
    c = client(server)
    full = c.chat.completions.create(model=DEMO, messages=[{"role": "user", "content": "Hi"}], max_tokens=6,
                                     temperature=0)
    assert full.choices[0].message.role == "assistant"
    chunks = list(c.chat.completions.create(model=DEMO, messages=[{"role": "user", "content": "Hi"}],
                                            max_tokens=6, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    content = [ch for ch in chunks if ch.choices]
    assert content[-1].choices[0].finish_reason == "length"
    assert "".join(ch.choices[0].delta.content or "" for ch in content) == full.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == 6 and chunks[-1].usage.prompt_tokens == full.usage.prompt_tokens


def test_stop_logprobs_n_and_cached_tokens(server):
    c = client(server)
    base = c.completions.create(prompt="Once upon a time", max_tokens=10, temperature=0, model=DEMO)
    text = base.choices[0].text
    stopped = c.completions.create(prompt="Once upon a time", max_tokens=10, temperature=0, model=DEMO,
                                   stop=[text[3:6]])
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.choices[0].text == text[:text.find(text[3:6])]
    lp = c.completions.create(prompt="Once upon a time", max_tokens=4, temperature=0, logprobs=3, model=DEMO)
    logprobs = lp.choices[0].logprobs
    assert len(logprobs.tokens) == 4 and all(len(t) == 3 for t in logprobs.top_logprobs)
    assert all(v <= 0 for v in logprobs.token_logprobs)
    chat = c.chat.completions.create(messages=[{"role": "user", "content": "Hi"}], max_tokens=3, temperature=0,
                                     logprobs=True, top_logprobs=2, model=DEMO)
    assert len(chat.choices[0].logprobs.content) == 3
    assert all(len(t.top_logprobs) == 2 for t in chat.choices[0].logprobs.content)
    many = c.completions.create(prompt="Once upon a time", max_tokens=5, temperature=1.0, n=3, seed=7,
                                model=DEMO)
    assert sorted(ch.index for ch in many.choices) == [0, 1, 2]
    assert many.usage.completion_tokens == 15
    long_prompt = "word " * 40
    c.completions.create(prompt=long_prompt, max_tokens=2, temperature=0, model=DEMO)
    again = c.completions.create(prompt=long_prompt, max_tokens=2, temperature=0, model=DEMO)
    assert again.usage.prompt_tokens_details.cached_tokens >= 32


def test_curl_raw_sse(server):
    body = json.dumps({"prompt": "Hi", "max_tokens": 3, "stream": True})
    out = subprocess.run(["curl", "-sN", server.url + "/v1/completions", "-H", "Content-Type: application/json",
                          "-d", body], capture_output=True, text=True, timeout=60).stdout
    events = [e for e in out.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    assert json.loads(events[-2][6:])["choices"][0]["finish_reason"] == "length"


def test_served_model_name_replaces_the_default(start_server):
    s = start_server("--served-model-name", "demo")
    c = client(s)
    assert [m.id for m in c.models.list().data] == ["demo"]
    assert c.completions.create(model="demo", prompt="Hi", max_tokens=2).usage.completion_tokens == 2
    with pytest.raises(openai.NotFoundError):  # vLLM answers only to the served name
        c.completions.create(model=DEMO, prompt="Hi", max_tokens=2)
