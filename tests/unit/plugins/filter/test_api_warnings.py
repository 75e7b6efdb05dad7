"""api_warnings: the operator's open APIs, the same sentences node_exposure returns, without a module run."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.filter.api_warnings import FilterModule, api_warnings

OPEN_LLAMA = {"prefix": "llama_server", "bind": "0.0.0.0", "api_key_set": False, "allow_unauthenticated": True}
KEYED_VLLM = {"prefix": "vllm_server", "bind": "0.0.0.0", "api_key_set": True, "allow_unauthenticated": False}
REFUSED_VLLM = {"prefix": "vllm_server", "bind": "10.0.0.5", "api_key_set": False, "allow_unauthenticated": False}
LOCAL_LLAMA = {"prefix": "llama_server", "bind": "127.0.0.1", "api_key_set": False, "allow_unauthenticated": True}


def test_an_api_open_by_choice_is_said_for_its_engine_only():
    said = api_warnings([OPEN_LLAMA, KEYED_VLLM], "node-a", "llama_server")
    assert said == ["node-a serves its API without a key on 0.0.0.0 (llama_server_allow_unauthenticated is true): "
                    "every host that reaches that address can use it."]
    assert api_warnings([OPEN_LLAMA, KEYED_VLLM], "node-a", "vllm_server") == []


def test_a_keyed_a_loopback_and_a_refused_api_say_nothing():
    for prefix in ("llama_server", "vllm_server"):
        assert api_warnings([KEYED_VLLM, REFUSED_VLLM, LOCAL_LLAMA], "node-a", prefix) == []


def test_bad_input():
    with pytest.raises(AnsibleFilterError, match="must be a list of APIs"):
        api_warnings("0.0.0.0", "node-a", "llama_server")


def test_registered():
    assert FilterModule().filters()["api_warnings"] is api_warnings
