"""Structured output through the official openai client on the random-weight demo: whatever the
model prefers, the answer follows the schema, regex or choice and ends with "stop"; streaming
gives the same text; a bad constraint is a 400 naming it. Both engine modes."""
import json
import re
import time
import urllib.request

import openai
import pytest

from conftest import DEMO, MODES, Server

NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}
SCHEMA = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 12},
    "rank": {"type": "integer", "minimum": 1, "maximum": 99},
    "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}},
    "required": ["city", "rank"]}


@pytest.fixture(scope="module", params=list(MODES))
def server(request):
    s = Server("--max-model-len", "512", *MODES[request.param])
    yield s
    s.stop()


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def both(create, **kwargs):
    """The answer's text and finish_reason, non-streaming and streaming."""
    r = create(stream=False, **kwargs)
    whole = (r.choices[0].message.content if hasattr(r.choices[0], "message") else r.choices[0].text,
             r.choices[0].finish_reason)
    text, finish = "", None
    for chunk in create(stream=True, **kwargs):
        for c in chunk.choices:
            text += (c.delta.content or "") if hasattr(c, "delta") else c.text
            finish = c.finish_reason or finish
    assert (text, finish) == whole
    return whole


def test_json_schema_regex_and_choice_outputs_follow_them(client):
    for seed in range(3):
        text, finish = both(client.chat.completions.create, model=DEMO, max_tokens=200, seed=seed,
                            messages=[{"role": "user", "content": "A city?"}], extra_body=NO_THINKING,
                            response_format={"type": "json_schema",
                                             "json_schema": {"name": "city", "schema": SCHEMA, "strict": True}})
        assert finish == "stop"
        doc = json.loads(text)
        assert isinstance(doc["city"], str) and len(doc["city"]) <= 12 and 1 <= doc["rank"] <= 99
        assert set(doc) <= {"city", "rank", "tags"}
    text, finish = both(client.completions.create, model=DEMO, prompt="Code:", max_tokens=50, seed=1,
                        extra_body={"guided_regex": "[A-Z]{2}-[0-9]{3}"})
    assert finish == "stop" and re.fullmatch("[A-Z]{2}-[0-9]{3}", text)
    text, finish = both(client.completions.create, model=DEMO, prompt="Pick:", max_tokens=20, temperature=0,
                        extra_body={"structured_outputs": {"choice": ["left", "right"]}})
    assert finish == "stop" and text in ("left", "right")


def test_bad_constraints_are_400s_naming_them(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=DEMO, prompt="x", max_tokens=5,
                                  extra_body={"guided_json": {"type": "array", "uniqueItems": True}})
    assert "uniqueItems" in str(e.value)


THINK_END = 151668  # "</think>" in Qwen3's tokenizer


def test_thinking_is_free_and_the_answer_after_it_follows_the_schema(client):
    """Thinking on (Qwen3's default): the constraint starts after "</think>" (a bias makes the random
    model write it soon); the answer, the content after the reasoning, parses against the schema."""
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"},
                                               "n": {"type": "integer", "minimum": 0, "maximum": 99}},
              "required": ["ok", "n"]}
    for seed in range(3):
        r = client.chat.completions.create(
            model=DEMO, max_tokens=100, seed=seed, messages=[{"role": "user", "content": "Think, then JSON"}],
            logit_bias={str(THINK_END): 30}, response_format={
                "type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
        choice = r.choices[0]
        assert choice.finish_reason == "stop", choice
        # The random model does not open with "<think>", so no reasoning is split off: the answer
        # is what follows "</think>" in the content.
        answer = choice.message.content.split("</think>")[-1]
        doc = json.loads(answer)
        assert isinstance(doc["ok"], bool) and 0 <= doc["n"] <= 99


def test_named_and_required_tool_choice_force_a_call(client):
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 10}}, "required": ["city"]}}}
    other = {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"enum": ["CET", "UTC"]}}, "required": ["zone"]}}}
    for choice in ({"type": "function", "function": {"name": "get_weather"}}, "required"):
        r = client.chat.completions.create(model=DEMO, max_tokens=100, seed=5, tools=[weather, other],
                                           tool_choice=choice, extra_body=NO_THINKING,
                                           messages=[{"role": "user", "content": "Weather in Oslo?"}])
        calls = r.choices[0].message.tool_calls
        assert len(calls) == 1, r
        args = json.loads(calls[0].function.arguments)
        if calls[0].function.name == "get_weather":
            assert isinstance(args["city"], str) and len(args["city"]) <= 10
        else:
            assert choice == "required" and args["zone"] in ("CET", "UTC")


def metric(server, name):
    body = urllib.request.urlopen(server.url + "/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.splitlines()
               if line.startswith(name + "{"))


def test_mask_and_compile_times_are_in_the_metrics(server, client):
    """Each masked step and each grammar compiled is counted in /metrics (from the engine core's
    process too, under --use-multiprocess)."""
    masks = metric(server, "miniinfer:structured_mask_seconds_count")
    compiles = metric(server, "miniinfer:grammar_compile_seconds_count")
    text, finish = both(client.completions.create, model=DEMO, prompt="Code:", max_tokens=20, seed=2,
                        extra_body={"guided_regex": "metrics-[0-9]{2}"})
    assert finish == "stop" and re.fullmatch("metrics-[0-9]{2}", text)
    # The outputs message carrying the last step's times may trail the response by a moment.
    deadline = time.time() + 10
    while metric(server, "miniinfer:structured_mask_seconds_count") < masks + 2 and time.time() < deadline:
        time.sleep(0.05)
    assert metric(server, "miniinfer:structured_mask_seconds_count") >= masks + 2  # two requests
    assert metric(server, "miniinfer:grammar_compile_seconds_count") == compiles + 1  # one compile
    assert metric(server, "miniinfer:grammar_compile_seconds_sum") > 0
