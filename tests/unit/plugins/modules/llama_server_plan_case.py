"""The head that the llama_server_plan tests plan: a CPU build and a GGUF model under tmp_path, and
the module run on a node whose only answers are the files: no command may run (the manager's
version comes from role common, manager_version)."""

import json

from ansible_collections.gpulab.inference.plugins.modules import llama_server_plan
import module_harness

NO_SANDBOX = {"PrivateTmp": None, "ProtectHome": None}


def head_files(tmp_path):
    build = tmp_path / "0123456789ab"
    build.mkdir()
    (build / "BUILD_INFO.json").write_text(json.dumps({"build_id": "0123456789ab", "cuda": False}))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + bytes(1020))
    return {"build_link": str(build), "model_path": str(model), "hardening": dict(NO_SANDBOX)}


def run(args):
    # no answers: a command the module ran would fail the test with a KeyError
    return module_harness.run_module(llama_server_plan.main, args, {}, {})
