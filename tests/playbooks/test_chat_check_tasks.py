"""The llama_server role's smoke step (roles/llama_server/tasks/smoke.yml, module chat_check) against the
OpenAI double on 127.0.0.1: its message as before, the API key kept out of the output, and a refused key
failing the step naming the head."""

import yaml
from doubles.openai_stream_server import OpenAIDouble
from playbook_runner import REPO, local_host, run_in

PLAN = {"devices": [{"name": "RPC0"}, {"name": "CUDA0"}], "tensor_split_arg": "1,1"}
KEY = "sk-gpulab-smoke-secret"


def test_smoke_sends_one_completion_and_keeps_the_key_out_of_the_output(tmp_path):
    with OpenAIDouble(api_key=KEY) as server:
        tasks = [{"name": "Case " + host, "ansible.builtin.include_tasks": str(REPO / "roles/llama_server/tasks/smoke.yml"),
                  "when": "inventory_hostname == '%s'" % host} for host in ("right", "wrong")]
        book = tmp_path / "smoke.yml"
        book.write_text(yaml.safe_dump([{"name": "Smoke", "hosts": "all", "gather_facts": False, "tasks": tasks}],
                                       sort_keys=False))
        common = {"__llama_server_url": server.base_url, "__llama_server_plan": PLAN, "llama_server_smoke_prompt": "Say hi.",
                  "llama_server_smoke_max_tokens": 3, "llama_server_smoke_timeout_s": 10}
        inventory = {"all": {"hosts": {"right": local_host(llama_server_api_key=KEY, **common),
                                       "wrong": local_host(llama_server_api_key="sk-wrong", **common)}}}
        result = run_in(tmp_path / "runner", book, inventory)
        requests = list(server.requests)

    shown = result.ok_results("Show the tokens, their speed and where the layers are")
    assert [r["msg"] for r in shown] == ["3 tokens at ? tok/s from RPC0, CUDA0 (split 1,1)"]
    assert requests == [{"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 3}]
    assert [(host, task) for host, task, _msg in result.failures] == [("wrong", "Send one chat completion through the head")]
    assert result.failures[0][2].endswith("/v1/chat/completions answered 401: the api_key was refused")
    assert not [event for event in result.events if KEY in str(event)]
