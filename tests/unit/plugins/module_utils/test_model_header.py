# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading a model's headers where it lies: ranged reads from a mirror on 127.0.0.1 (the model
role's own server, model_io.ModelServer), a local directory, and what a plan needs of them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import functools
import http.server
import os
import threading

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import gguf
from ansible_collections.gpulab.inference.plugins.module_utils import gguf_plan as gp
from ansible_collections.gpulab.inference.plugins.module_utils import model_header as mh
from ansible_collections.gpulab.inference.plugins.module_utils import model_io
from ansible_collections.gpulab.inference.plugins.module_utils import synthetic_hf as sh
from ansible_collections.gpulab.inference.plugins.module_utils import synthetic_model as sm
from ansible_collections.gpulab.inference.plugins.module_utils import hf_checkpoint as hf

GGUF_OPTIONS = {"shards": 2, "layers": 8, "hidden_size": 1024, "expert_ffn_size": 512}


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    """A two-shard GGUF and an FP8 checkpoint under one root, served on 127.0.0.1 with ranges."""
    root = tmp_path_factory.mktemp("mirror")
    opts = sm.validate_options(GGUF_OPTIONS)
    plan = sm.ModelPlan(opts, str(root / "synthetic.gguf"), sm.builtin_vocab(), None)
    sm.write_model(plan, opts["seed"])
    hf = root / "hf"
    hf.mkdir()
    sh.write_model(str(hf), sh.ModelPlan(sh.validate_options({})))
    allowed = [os.path.relpath(os.path.join(d, f), str(root)) for d, _s, files in os.walk(str(root)) for f in files]
    server = model_io.ModelServer("127.0.0.1", 0, str(root), allowed)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield {"root": root, "url": "http://127.0.0.1:%d" % server.server_address[1], "gguf": plan.paths}
    server.shutdown()
    server.server_close()


def test_a_split_gguf_on_a_mirror_is_read_from_its_headers(mirror):
    first = os.path.basename(mirror["gguf"][0])
    source = mh.Source("%s/%s" % (mirror["url"], first))
    model = source.gguf_model()
    local = gguf.read_gguf_model(mirror["gguf"][0])
    assert source.format == "gguf" and len(model.shards) == 2
    assert [(i.name, i.dims, i.ggml_type) for i, _s in model.tensors] == [(i.name, i.dims, i.ggml_type) for i, _s in local.tensors]
    assert gp.model_facts(model) == dict(gp.model_facts(local), size_mib=gp.model_facts(model)["size_mib"])
    assert source.size_bytes == sum(os.path.getsize(p) for p in mirror["gguf"])
    # the headers and tables, not the weights
    assert 0 < source.counter.bytes_read < source.size_bytes / 20, (source.counter.bytes_read, source.size_bytes)


def test_a_checkpoint_on_a_mirror_is_read_from_config_and_headers(mirror):
    source = mh.Source("%s/hf" % mirror["url"])
    config, tensors = source.hf_checkpoint()
    assert source.format == "hf" and config["architectures"] == ["MiniMaxM2ForCausalLM"]
    local = {}
    for name in os.listdir(str(mirror["root"] / "hf")):
        if name.endswith(".safetensors"):
            with open(str(mirror["root"] / "hf" / name), "rb") as stream:
                length = int.from_bytes(stream.read(8), "little")
                stream.seek(0)
                local.update(hf.parse_safetensors_header(stream.read(8 + length), name))
    assert tensors == local
    assert source.counter.bytes_read < source.size_bytes / 2


def test_a_local_directory_reads_the_same(mirror):
    source = mh.Source(mirror["gguf"][0])
    assert source.kind == "controller" and len(source.gguf_model().shards) == 2
    assert 0 < source.counter.bytes_read < source.size_bytes / 20


def test_a_missing_shard_is_named(mirror, tmp_path):
    lone = tmp_path / os.path.basename(mirror["gguf"][0])
    lone.write_bytes(open(mirror["gguf"][0], "rb").read())
    with pytest.raises(mh.HeaderError, match="-00002-of-00002.gguf is missing"):
        mh.Source(str(lone))


def test_not_a_gguf_is_named(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"PK\x03\x04" + b"\0" * 64)
    with pytest.raises(mh.HeaderError, match="not a GGUF file"):
        mh.Source(str(bad)).gguf_model()


def test_a_mirror_without_ranges_is_refused(mirror):
    class NoRanges(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(NoRanges, directory=str(mirror["root"]))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        source = mh.Source("http://127.0.0.1:%d/%s" % (server.server_address[1], os.path.basename(mirror["gguf"][0])))
        with pytest.raises(mh.HeaderError, match=r"HTTP 200 OK; the mirror must answer byte ranges \(206\)"):
            source.gguf_model()
        assert source.counter.bytes_read == 0
    finally:
        server.shutdown()
        server.server_close()


def test_a_source_that_does_not_answer_is_named():
    with pytest.raises(mh.HeaderError, match="model_source http://127.0.0.1:9/m.gguf: "):
        mh.Source("http://127.0.0.1:9/m.gguf", timeout_s=2)


def test_head_is_not_a_source_to_plan_before_download():
    with pytest.raises(mh.HeaderError, match="model_source is head"):
        mh.Source("head")


def test_a_safetensors_header_longer_than_its_file_is_named(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes((10 ** 6).to_bytes(8, "little") + b"{}")
    with pytest.raises(mh.HeaderError, match="header length 1000000 does not fit the file's 10 bytes"):
        mh.Source(str(tmp_path)).hf_checkpoint()


# ---------------------------------------------------------------- plan_hardware

def test_hardware_in_both_forms():
    nodes = mh.parse_hardware([{"name": "a", "gpus": 2, "memory_gib": 96},
                               {"name": "b", "gpus": [{"memory_mib": 97887, "kept_gib": 10}]}])
    assert nodes == [{"name": "a", "gpus": [{"index": 0, "memory_total_mib": 98304, "kept_mib": 0},
                                            {"index": 1, "memory_total_mib": 98304, "kept_mib": 0}]},
                     {"name": "b", "gpus": [{"index": 0, "memory_total_mib": 97887, "kept_mib": 10240}]}]
    assert mh.parse_hardware('[{"gpus": 1, "memory_gib": 80}]')[0]["name"] == "node-0"


@pytest.mark.parametrize("value, message", [
    ("a lot", "plan_hardware is not JSON"),
    ({"gpus": 2}, "plan_hardware is {'gpus': 2}, not a list of nodes"),
    ([{"gpus": 0, "memory_gib": 96}], r"plan_hardware\[0\].gpus is 0; give 1 or more GPUs"),
    ([{"gpus": 2}], r"plan_hardware\[0\].gpus\[0\] has no memory_gib"),
    ([{"gpus": 1, "memory_gib": "96"}], r"plan_hardware\[0\].gpus\[0\].memory_gib is '96', not a positive number"),
    ([{"gpus": 1, "memory_gib": 8, "kept_gib": 8}], r"keeps 8192 MiB for other services, all of its 8192 MiB"),
    ([{"name": "a", "gpus": 1, "memory_gib": 8}, {"name": "a", "gpus": 1, "memory_gib": 8}], "names a node twice"),
])
def test_bad_hardware_is_named(value, message):
    with pytest.raises(mh.HeaderError, match=message):
        mh.parse_hardware(value)
