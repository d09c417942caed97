"""promtool lints the live /metrics of a server that has served traffic (the unit test lints a
sample body; this one checks what a scraper really gets)."""
import os
import subprocess
import urllib.request

import openai

CHECK = os.path.join(os.path.dirname(__file__), "..", "unit", "promtool_check.sh")


def test_live_metrics_pass_promtool(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    client.completions.create(model=client.models.list().data[0].id, prompt="Hello", max_tokens=4)
    body = urllib.request.urlopen(server.url + "/metrics", timeout=10).read()
    assert b"vllm:generation_tokens_total" in body
    result = subprocess.run(["bash", CHECK, "-"], input=body, capture_output=True)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
