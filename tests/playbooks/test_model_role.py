"""The model role (playbooks/model.yml): every synthetic_gguf option reaches the module, the
vocabulary comes from the controller, the manifest on the head says which file to serve, and bad
input stops the play before any change."""

import hashlib
import json
import os
import tarfile
import threading

import pytest
import yaml
from playbook_runner import REPO, local_host, run_in

from ansible_collections.gpulab.inference.plugins.module_utils import gguf
from ansible_collections.gpulab.inference.plugins.module_utils import model_io
from ansible_collections.gpulab.inference.plugins.module_utils import synthetic_model as sm
from ansible_collections.gpulab.inference.plugins.modules import synthetic_gguf

ROLE = REPO / "roles" / "model"
SMALL = {"layers": 1, "hidden_size": 64, "attention_heads": 4, "kv_heads": 2, "head_dim": 32, "experts": 4,
         "experts_used": 2, "expert_ffn_size": 32, "context_length": 1024, "seed": 3, "shards": 2,
         "quantization": "F16", "chat_template": "<|im_start|>template from the inventory", "architecture": "minimax-m2"}


def module_options():
    """synthetic_gguf's own options (without the file attributes every file module takes)."""
    return set(yaml.safe_load(synthetic_gguf.DOCUMENTATION)["options"])


def inventory(tmp_path, **hostvars):
    return {"all": {"children": {"gpu_nodes": {"children": {"inference_head": {"hosts": {
        "head": local_host(model_manifest_path=str(tmp_path / "etc" / "model.json"),
                           model_vocab_dir=str(tmp_path / "vocab"),
                           model_vocab_cache_dir=str(tmp_path / "vocab-cache"), **hostvars)}}}}}}}


def manifest(tmp_path):
    return json.loads((tmp_path / "etc" / "model.json").read_text())


def vocabulary(path, n_tokens=50):
    tokens = ["<s>", "</s>"] + ["t%d" % i for i in range(n_tokens - 2)]
    with open(str(path), "wb") as stream:
        gguf.write_gguf(stream, [
            ("tokenizer.ggml.model", gguf.GGUFValue(gguf.STRING, "gpt2")),
            ("tokenizer.ggml.tokens", gguf.GGUFValue(gguf.ARRAY, tokens, gguf.STRING)),
        ], [], None)


def test_every_module_option_is_passed_through():
    task = yaml.safe_load((ROLE / "tasks" / "synthetic.yml").read_text())[1]
    passed = set(task["gpulab.inference.synthetic_gguf"]) - {"owner", "group", "mode"}
    assert passed == module_options()
    spec = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    assert set(spec["argument_specs"]["main"]["options"]["model_synthetic"]["options"]) == module_options()


def test_synthetic_model_keeps_every_option_and_records_the_manifest(run_playbook, tmp_path):
    model = tmp_path / "models" / "m.gguf"
    result = run_playbook("playbooks/model.yml", inventory(tmp_path, model_synthetic=dict(SMALL, path=str(model))))
    assert result.status == "successful", result.failures
    first = tmp_path / "models" / "m-00001-of-00002.gguf"
    assert manifest(tmp_path) == {
        "managed_by": "gpulab.inference", "source": "synthetic", "path": str(first),
        "shard_paths": [str(first), str(tmp_path / "models" / "m-00002-of-00002.gguf")],
        "architecture": "minimax-m2", "size_bytes": manifest(tmp_path)["size_bytes"],
        "synthetic_options_sha256": gguf.read_gguf(str(first)).get(sm.KEY_OPTIONS_SHA256),
    }
    parsed = gguf.read_gguf(str(first))
    options = json.loads(parsed.get(sm.KEY_OPTIONS_JSON))
    for name in ("attention_heads", "kv_heads", "head_dim", "context_length", "chat_template", "quantization", "seed"):
        assert options[name] == SMALL[name], name
    assert parsed.get("minimax-m2.context_length") == 1024
    assert parsed.get("tokenizer.chat_template") == SMALL["chat_template"]

    again = run_playbook("playbooks/model.yml", inventory(tmp_path, model_synthetic=dict(SMALL, path=str(model))))
    assert again.status == "successful"
    assert again.changed_tasks() == []


def test_vocabulary_from_a_controller_archive(run_playbook, tmp_path):
    vocabulary(tmp_path / "ggml-vocab-test.gguf", 50)
    archive = tmp_path / "src.tar.gz"
    with tarfile.open(str(archive), "w:gz") as tar:
        tar.add(str(tmp_path / "ggml-vocab-test.gguf"), arcname="llama.cpp/models/ggml-vocab-test.gguf")
    hostvars = {"model_synthetic": {"path": str(tmp_path / "models" / "m.gguf"), "layers": 1, "hidden_size": 64},
                "model_vocab_archive": str(archive), "model_vocab_archive_member": "llama.cpp/models/ggml-vocab-test.gguf"}
    result = run_playbook("playbooks/model.yml", inventory(tmp_path, **hostvars))
    assert result.status == "successful", result.failures
    copied = tmp_path / "vocab" / "ggml-vocab-test.gguf"
    assert copied.read_bytes() == (tmp_path / "ggml-vocab-test.gguf").read_bytes()
    (written,) = result.ok_results("Write the synthetic model")
    assert written["vocab_size"] == 50
    again = run_playbook("playbooks/model.yml", inventory(tmp_path, **hostvars))
    assert again.status == "successful"
    assert again.changed_tasks() == []
    # The member was extracted once, into the controller's cache; the second run read it from there.
    assert again.ok_results("Extract the vocabulary member") == []
    (cached,) = list((tmp_path / "vocab-cache").glob("src.tar.gz-*/ggml-vocab-test.gguf"))
    assert cached.read_bytes() == copied.read_bytes()
    # A new archive under the same name (another size and time) is extracted again.
    vocabulary(tmp_path / "ggml-vocab-test.gguf", 60)
    with tarfile.open(str(archive), "w:gz") as tar:
        tar.add(str(tmp_path / "ggml-vocab-test.gguf"), arcname="llama.cpp/models/ggml-vocab-test.gguf")
    os.utime(str(archive), (1_700_000_000, 1_700_000_000))
    renewed = run_playbook("playbooks/model.yml", inventory(tmp_path, **hostvars))
    assert renewed.status == "successful", renewed.failures
    assert copied.read_bytes() == (tmp_path / "ggml-vocab-test.gguf").read_bytes()
    (rewritten,) = renewed.ok_results("Write the synthetic model")
    assert rewritten["vocab_size"] == 60
    assert len(list((tmp_path / "vocab-cache").glob("src.tar.gz-*"))) == 2
    # The work directories of both extractions are gone (it once stayed, in the controller's /tmp).
    assert [p.name for p in (tmp_path / "vocab-cache").iterdir() if not p.name.startswith("src.tar.gz-")] == []


def test_given_model_is_recorded(run_playbook, tmp_path):
    model = tmp_path / "real-00001-of-00002.gguf"
    model.write_bytes(b"GGUF")
    result = run_playbook("playbooks/model.yml", inventory(tmp_path, model_path=str(model)))
    assert result.status == "successful", result.failures
    assert manifest(tmp_path) == {"managed_by": "gpulab.inference", "source": "path", "path": str(model),
                                  "shard_paths": None, "architecture": None, "size_bytes": None,
                                  "synthetic_options_sha256": None}


def test_check_mode_plans_a_fresh_head_and_writes_nothing(tmp_path):
    vocabulary(tmp_path / "ggml-vocab-test.gguf", 50)
    archive = tmp_path / "src.tar.gz"
    with tarfile.open(str(archive), "w:gz") as tar:
        tar.add(str(tmp_path / "ggml-vocab-test.gguf"), arcname="llama.cpp/models/ggml-vocab-test.gguf")
    hostvars = {"model_synthetic": {"path": str(tmp_path / "models" / "m.gguf"), "layers": 1, "hidden_size": 64},
                "model_vocab_archive": str(archive), "model_vocab_archive_member": "llama.cpp/models/ggml-vocab-test.gguf"}
    result = run_in(tmp_path / "runner", "playbooks/model.yml", inventory(tmp_path, **hostvars), cmdline="--check --diff")
    assert result.status == "successful", result.failures
    changed = {task for _host, task in result.changed_tasks()}
    assert {"Copy the vocabulary to the head", "Write the synthetic model", "Write the model manifest"} <= changed
    assert not (tmp_path / "etc").exists()
    assert not (tmp_path / "vocab").exists()
    assert not (tmp_path / "models").exists()
    # The member is extracted on the controller in check mode too, into the cache; no work directory stays.
    assert [p.name for p in (tmp_path / "vocab-cache").iterdir() if not p.name.startswith("src.tar.gz-")] == []


def test_check_mode_refuses_a_missing_given_model(tmp_path):
    result = run_in(tmp_path / "runner", "playbooks/model.yml", inventory(tmp_path, model_path="/nonexistent/m.gguf"),
                    cmdline="--check")
    assert result.status == "failed"
    (failure,) = result.failures
    assert failure[1] == "The model file exists on the head"
    assert "model_path=/nonexistent/m.gguf is missing" in failure[2]


BAD = [
    ("neither", {}, "Exactly one of model_source, model_path and model_synthetic is set",
     'model_source="", model_path="", model_synthetic empty'),
    ("both", {"model_path": "/m.gguf", "model_synthetic": {"path": "/x.gguf"}},
     "Exactly one of model_source, model_path and model_synthetic is set", 'model_path="/m.gguf", model_synthetic set'),
    ("source and synthetic", {"model_source": "http://10.0.0.5/m.gguf", "model_synthetic": {"path": "/x.gguf"}},
     "Exactly one of model_source, model_path and model_synthetic is set", 'model_source="http://10.0.0.5/m.gguf"'),
    ("source and path", {"model_source": "/srv/m.gguf", "model_path": "/m.gguf"},
     "Exactly one of model_source, model_path and model_synthetic is set", 'model_path="/m.gguf"'),
    # gpulab_engine auto cannot say which engine reads a model that is not named: refused first
    ("head without path", {"model_source": "head"},
     "Run the engine's model step", "model_source is head, but model_path (the model on the head) is not set"),
    ("relative source", {"model_source": "models/m.gguf"}, "Name the nodes that get the model",
     "a path on the controller must be absolute"),
    ("source of another scheme", {"model_source": "ftp://mirror/m.gguf"}, "Name the nodes that get the model",
     "only http:// and https:// mirrors are fetched"),
    ("source not a first shard", {"model_source": "/srv/m-00002-of-00002.gguf"}, "List the model's files at the source",
     "give the first shard"),
    ("unknown synthetic key", {"model_synthetic": {"path": "/x.gguf", "kv_head": 2}},
     "Validating arguments against arg spec 'main'", "kv_head"),
    ("synthetic key of the wrong type", {"model_synthetic": {"path": "/x.gguf", "layers": "many"}},
     "Validating arguments against arg spec 'main'", "layers"),
    ("synthetic without path", {"model_synthetic": {"layers": 1}}, "A synthetic model names its path",
     "model_synthetic has no path"),
    ("two vocabularies", {"model_synthetic": {"path": "/x.gguf", "vocab_gguf": "/v.gguf"}, "model_vocab_src": "/c.gguf"},
     "The vocabulary comes from one place", "model_vocab_src=\"/c.gguf\""),
    ("archive without member", {"model_synthetic": {"path": "/x.gguf"}, "model_vocab_archive": "/a.tar.gz"},
     "The vocabulary comes from one place", "model_vocab_archive_member=\"\""),
    ("missing given model", {"model_path": "/nonexistent/m.gguf"}, "The model file exists on the head",
     "model_path=/nonexistent/m.gguf is missing"),
]


@pytest.mark.parametrize("hostvars, task, words", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_input_stops_before_any_change(run_playbook, tmp_path, hostvars, task, words):
    result = run_playbook("playbooks/model.yml", inventory(tmp_path, **hostvars))
    assert result.status == "failed"
    (failure,) = result.failures
    assert failure[1].startswith(task)
    if words:
        assert words in failure[2] or words in json.dumps(result.failed_events()[0]["res"])
    assert result.changed_tasks() == []
    assert not (tmp_path / "etc").exists()


SHARDS = {"m-00001-of-00002.gguf": b"G" * 300000, "m-00002-of-00002.gguf": b"H" * 200000}


def sums(files):
    return "".join("%s  %s\n" % (hashlib.sha256(data).hexdigest(), name) for name, data in files.items())


def test_model_from_a_controller_directory_then_nothing_moves(run_playbook, tmp_path):
    src = tmp_path / "src" / "m"
    src.mkdir(parents=True)
    for name, data in SHARDS.items():
        (src / name).write_bytes(data)
    (src / "SHA256SUMS").write_text(sums(SHARDS))
    dest = tmp_path / "dest"
    hostvars = {"model_source": str(src / "m-00001-of-00002.gguf"), "model_dir": str(dest)}
    result = run_playbook("playbooks/model.yml", inventory(tmp_path, **hostvars))
    assert result.status == "successful", result.failures
    for name, data in SHARDS.items():
        assert (dest / name).read_bytes() == data
    recorded = manifest(tmp_path)
    assert {k: recorded[k] for k in ("source", "origin", "format", "directory", "path", "shard_paths", "size_bytes")} == {
        "source": "controller", "origin": str(src / "m-00001-of-00002.gguf"), "format": "gguf", "directory": str(dest),
        "path": str(dest / "m-00001-of-00002.gguf"), "shard_paths": [str(dest / n) for n in SHARDS], "size_bytes": 500000}
    assert [(f["name"], f["sha256"]) for f in recorded["files"]] == [
        (n, hashlib.sha256(d).hexdigest()) for n, d in SHARDS.items()]
    again = run_playbook("playbooks/model.yml", inventory(tmp_path, **hostvars))
    assert again.status == "successful", again.failures
    assert again.changed_tasks() == []
    (plan,) = again.ok_results("Plan what each node still needs, reading back files it never verified")
    assert (plan["fetch_bytes"], plan["hashed_bytes"]) == (0, 0)


def test_model_from_a_mirror_resumes_and_refetches_what_changed(run_playbook, tmp_path):
    ckpt = tmp_path / "mirror" / "ckpt"
    ckpt.mkdir(parents=True)
    files = {"config.json": b"{}", "model.safetensors": b"W" * 400000, "tokenizer.json": b'{"t": 1}'}
    for name, data in files.items():
        (ckpt / name).write_bytes(data)
    server = model_io.ModelServer("127.0.0.1", 0, str(tmp_path / "mirror"),
                                  ["ckpt/" + n for n in files] + ["ckpt/SHA256SUMS"])
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    url = "http://127.0.0.1:%d/ckpt" % server.server_address[1]
    dest = tmp_path / "dest" / "ckpt"
    dest.mkdir(parents=True)
    (dest / "model.safetensors.part").write_bytes(b"W" * 150000)  # an interrupted earlier run
    hostvars = {"model_source": url, "model_dir": str(dest), "model_progress_interval_s": 1}
    try:
        result = run_playbook("playbooks/model.yml", inventory(tmp_path, **hostvars))
        assert result.status == "successful", result.failures
        (fetched,) = result.ok_results("Keep the transfer's records")
        status = fetched["ansible_facts"]["__model_fetch_result"]
        assert status["resumed_bytes"] == 150000 and status["fetched_bytes"] == 2 + 250000 + 8
        for name, data in files.items():
            assert (dest / name).read_bytes() == data
        assert not list(dest.glob("*.part"))
        recorded = manifest(tmp_path)
        assert (recorded["format"], recorded["path"], recorded["source"]) == ("hf", str(dest), "url")
        assert [f["sha256"] for f in recorded["files"]] == [hashlib.sha256(d).hexdigest() for d in files.values()]

        again = run_playbook("playbooks/model.yml", inventory(tmp_path, **hostvars))
        assert again.status == "successful", again.failures
        assert again.changed_tasks() == []

        # The mirror's file changes (same size) and its SHA256SUMS says so: fetched again.
        files["model.safetensors"] = b"V" * 400000
        (ckpt / "model.safetensors").write_bytes(files["model.safetensors"])
        (ckpt / "SHA256SUMS").write_text(sums(files))
        third = run_playbook("playbooks/model.yml", inventory(tmp_path, **hostvars))
        assert third.status == "successful", third.failures
        assert (dest / "model.safetensors").read_bytes() == files["model.safetensors"]
        (fetched,) = third.ok_results("Keep the transfer's records")
        assert [f["name"] for f in fetched["ansible_facts"]["__model_fetch_result"]["files"]] == ["model.safetensors"]
    finally:
        server.shutdown()
        server.server_close()


def test_check_mode_lists_and_plans_a_mirror_source_and_writes_nothing(tmp_path):
    (tmp_path / "mirror").mkdir()
    (tmp_path / "mirror" / "m.gguf").write_bytes(b"G" * 1000)
    server = model_io.ModelServer("127.0.0.1", 0, str(tmp_path / "mirror"), ["m.gguf"])
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    hostvars = {"model_source": "http://127.0.0.1:%d/m.gguf" % server.server_address[1], "model_dir": str(tmp_path / "dest")}
    try:
        result = run_in(tmp_path / "runner", "playbooks/model.yml", inventory(tmp_path, **hostvars), cmdline="--check")
    finally:
        server.shutdown()
        server.server_close()
    assert result.status == "successful", result.failures
    changed = {task for _host, task in result.changed_tasks()}
    assert {"Report the transfer a real run would make", "Write the model manifest"} <= changed
    (plan,) = result.ok_results("Plan what each node still needs, reading back files it never verified")
    assert plan["fetch_bytes"] == 1000
    assert not (tmp_path / "dest").exists() and not (tmp_path / "etc").exists()
