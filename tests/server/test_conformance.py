"""What real clients send is honoured or refused, never silently ignored (both server modes).

- Every request field of the README's compatibility table, on both endpoints, streaming and not:
  a refused field (or a value a default-only field does not take) is a 400 that names it.
- The honoured sampling and response fields do what they say (checked on the demo model's
  token ids, greedy).
- The official openai client's typed requests (content parts, tools, tool results) and
  LangChain's ChatOpenAI request shapes are served.
- No error message shows template line numbers, C++ exception text or parser internals.
"""
import json
import os
import re
import urllib.error
import urllib.request

import openai
import pytest

from conftest import DEMO, MODES, Server

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")
INTERNALS = re.compile(r"line \d+|std::|what\(\)|nlohmann|json\.exception|\[json\.|undefined|operand")


def table():
    """The README's compatibility rows: (field, [front ends], use)."""
    rows = []
    with open(README) as f:
        for line in f:
            m = re.match(r"\| `(\w+)` \| ([\w, ]+) \| (honoured|default only|refused|informational)", line)
            if m:
                rows.append((m.group(1), [w.strip() for w in m.group(2).split(",")], m.group(3)))
    return rows


def post(server, path, body):
    req = urllib.request.Request(server.url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            raw = r.read().decode()
            if body.get("stream"):
                return r.status, [json.loads(line[6:]) for line in raw.splitlines()
                                  if line.startswith("data: {")]
            return r.status, json.loads(raw)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def base(endpoint):
    if endpoint == "chat":
        return "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    return "/v1/completions", {"prompt": "Hi", "max_tokens": 4}


def asking(field):
    return {"response_format": {"type": "json_object"}, "modalities": ["text", "audio"],
            "echo": True, "use_beam_search": True, "length_penalty": 0.5, "priority": 3,
            "store": True, "best_of": 3, "parallel_tool_calls": False}.get(field, {"x": 1})


@pytest.mark.parametrize("stream", [False, True])
def test_every_refused_field_is_a_400_naming_it(server, stream):
    rows = table()
    assert len(rows) > 60, "the README's compatibility table is missing"
    checked = 0
    for field, front_ends, use in rows:
        if use not in ("refused", "default only"):
            continue
        for endpoint in ("chat", "completions"):
            if endpoint not in front_ends:
                continue
            path, body = base(endpoint)
            body.update({field: asking(field), "stream": stream})
            status, answer = post(server, path, body)
            assert status == 400, (field, endpoint, answer)
            message = answer["error"]["message"]
            assert field in message, (field, message)
            assert not INTERNALS.search(message), message
            checked += 1
    assert checked > 30  # structured output and tool_choice no longer refused


def test_defaults_and_unknown_fields_pass(server):
    for endpoint in ("chat", "completions"):
        path, body = base(endpoint)
        body.update({"user": "u1", "response_format": {"type": "text"}, "echo": False,
                     "a_field_from_the_future": {"x": 1}, "priority": 0, "n": 1})
        status, answer = post(server, path, body)
        assert status == 200, answer


def ids_of(server, endpoint, stream=False, **fields):
    """The generated token ids (return_token_ids) and the last choice."""
    path, body = base(endpoint)
    body.update({"temperature": 0, "max_tokens": 6, "ignore_eos": True, "return_token_ids": True,
                 "stream": stream, **fields})
    status, answer = post(server, path, body)
    assert status == 200, answer
    if not stream:
        return answer["choices"][0]["token_ids"], answer["choices"][0]
    ids = [t for chunk in answer for c in chunk["choices"] for t in c.get("token_ids", [])]
    return ids, [c for chunk in answer for c in chunk["choices"]][-1]


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
@pytest.mark.parametrize("stream", [False, True])
def test_sampling_fields_are_honoured(server, endpoint, stream):
    plain, _ = ids_of(server, endpoint, stream)
    assert len(plain) == 6
    forced, _ = ids_of(server, endpoint, stream, logit_bias={"1234": 100})
    assert forced == [1234] * 6
    allowed, _ = ids_of(server, endpoint, stream, allowed_token_ids=[11, 13, 4000])
    assert set(allowed) <= {11, 13, 4000}
    for banned in plain:  # a token that is a word of its own: the ban must cover it
        _, text = post(server, "/detokenize", {"tokens": [banned]})
        if text["prompt"].strip() and post(server, "/tokenize", {"prompt": text["prompt"]})[1]["tokens"] == [banned]:
            words, _ = ids_of(server, endpoint, stream, bad_words=[text["prompt"]])
            assert banned not in words, (banned, text, words)
            break
    status, tokenized = post(server, "/tokenize", {"prompt": "one two three four five six seven"})
    long_prompt = tokenized["tokens"]
    if endpoint == "completions":
        path, body = base(endpoint)
        body.update({"prompt": long_prompt, "truncate_prompt_tokens": 3})
        status, answer = post(server, path, body)
        assert status == 200 and answer["usage"]["prompt_tokens"] == 3, answer


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_stop_reason_and_include_stop_str_in_output(server, endpoint):
    _, plain = post(server, "/v1/completions", {"prompt": "Hi", "temperature": 0, "max_tokens": 12,
                                                "ignore_eos": True})
    choice = plain["choices"][0]
    text = choice["text"]
    assert choice["stop_reason"] is None and choice["finish_reason"] == "length"
    stop = text[len(text) // 2:len(text) // 2 + 2]
    for include in (False, True):
        _, answer = post(server, "/v1/completions", {"prompt": "Hi", "temperature": 0, "max_tokens": 12,
                                                     "stop": [stop], "include_stop_str_in_output": include})
        c = answer["choices"][0]
        assert c["finish_reason"] == "stop" and c["stop_reason"] == stop, c
        assert c["text"] == text[:text.find(stop)] + (stop if include else ""), (c, text, stop)
    path, body = base(endpoint)
    body.update({"temperature": 0, "max_tokens": 12, "ignore_eos": True})
    ids, _ = ids_of(server, endpoint)
    _, answer = post(server, path, {**body, "stop_token_ids": [ids[2]]})
    assert answer["choices"][0]["stop_reason"] == ids[2]


def test_request_id_and_tokens_as_ids(server):
    status, answer = post(server, "/v1/completions", {"prompt": "Hi", "max_tokens": 2, "request_id": "mine-1",
                                                       "logprobs": 1, "return_tokens_as_token_ids": True})
    assert status == 200 and answer["id"] == "cmpl-mine-1"
    assert all(t.startswith("token_id:") for t in answer["choices"][0]["logprobs"]["tokens"])


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none")


def test_openai_client_content_parts_and_tool_turns(server):
    c = client(server)
    r = c.chat.completions.create(
        model=DEMO, max_tokens=4,
        messages=[{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                  {"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}]}])
    assert r.choices[0].finish_reason in ("length", "stop")
    r = c.chat.completions.create(
        model=DEMO, max_tokens=4,
        messages=[{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function",
                   "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                  {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "18 C"}]},
                  {"role": "developer", "content": "Answer in one line."}])
    assert r.choices[0].message.role == "assistant"
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=DEMO, max_tokens=4, messages=[{"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}])
    assert "image_url" in str(e.value) and "text only" in str(e.value)
    assert "vision input (images and video) is not supported" in str(e.value)
    assert e.value.status_code == 400
    assert not INTERNALS.search(str(e.value))
    # Structured output with thinking on (Qwen3's default): constrained after the reasoning.
    r = c.chat.completions.create(model=DEMO, max_tokens=4, messages=[{"role": "user", "content": "x"}],
                                  response_format={"type": "json_object"})
    assert r.choices[0].finish_reason in ("length", "stop")
    stream = c.chat.completions.create(model=DEMO, max_tokens=3, stream=True, stream_options={"include_usage": True},
                                       messages=[{"role": "user", "content": [{"type": "text", "text": "Hi"}]}])
    assert list(stream)[-1].usage.completion_tokens == 3


@pytest.fixture(scope="module", params=list(MODES))
def tool_server(request):
    s = Server("--enable-auto-tool-choice", "--tool-call-parser", "hermes", *MODES[request.param])
    yield s
    assert s.stop() == 0, s.log()[-3000:]


def test_langchain_chat_openai(tool_server):
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return "18 C"

    llm = ChatOpenAI(base_url=tool_server.url + "/v1", api_key="none", model=DEMO, max_tokens=4,
                     temperature=0, max_retries=0)
    answer = llm.invoke([SystemMessage("Be brief."), HumanMessage("Hello")])
    assert isinstance(answer.content, str)
    chunks = list(llm.stream([HumanMessage("Hello")]))
    assert len(chunks) > 1
    with_tools = llm.bind_tools([get_weather])
    with_tools.invoke([HumanMessage("Weather in Paris?")])
    call = {"name": "get_weather", "args": {"city": "Paris"}, "id": "call_1", "type": "tool_call"}
    history = [HumanMessage("Weather in Paris?"), AIMessage(content="", tool_calls=[call]),
               ToolMessage("18 C", tool_call_id="call_1"),
               HumanMessage(content=[{"type": "text", "text": "And tomorrow?"}])]
    assert isinstance(with_tools.invoke(history).content, str)
    with pytest.raises(openai.BadRequestError) as e:
        llm.invoke([HumanMessage(content=[{"type": "text", "text": "What is it?"},
                                          {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}])])
    assert "text only" in str(e.value)
