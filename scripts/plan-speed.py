# managed by gpulab.inference
"""How fast playbooks/plan.yml answers "will it fit?", and how little of the model it reads: a
two-shard synthetic GGUF and a synthetic FP8 checkpoint (the collection's own generators) served
from a mirror on 127.0.0.1 by the model role's ranged server, planned on two local nodes of two
RTX PRO 6000 each (the container lab's fake nvidia-smi profile rtx-pro-6000-x2; vLLM needs the same
GPU count on every node, so the lab's one-GPU worker would leave it no layout).

    .venv/bin/python scripts/plan-speed.py [--dir .build/plan-speed] [--runs 3]

Run from the repository root with ANSIBLE_COLLECTIONS_PATH naming .build/collections. Writes
JSON: per model its size, the bytes the plan says it read, the bytes the mirror sent (headers
included), the reads, and each run's wall time of `ansible-playbook playbooks/plan.yml`. The
models are generated once into --dir and kept for the next run.
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the collection as Ansible finds it (.build/collections/ansible_collections/gpulab/inference -> the checkout)
sys.path.insert(0, os.environ.get("ANSIBLE_COLLECTIONS_PATH", "").split(os.pathsep)[0] or os.path.join(REPO, ".build", "collections"))

from ansible_collections.gpulab.inference.plugins.module_utils import model_io  # noqa: E402
from ansible_collections.gpulab.inference.plugins.module_utils import synthetic_hf as sh  # noqa: E402
from ansible_collections.gpulab.inference.plugins.module_utils import synthetic_model as sm  # noqa: E402

LAB_FILES = os.path.join(REPO, "molecule", "lab", "files")
# A few GiB each: 3.3 GiB of Q8_0 GGUF in two shards, 4.6 GiB of FP8 safetensors in 1 GiB shards.
GGUF_OPTIONS = {"shards": 2, "layers": 16, "hidden_size": 2048, "experts": 32, "expert_ffn_size": 1024}
HF_OPTIONS = {"hidden_size": 2048, "layers": 16, "experts": 32, "expert_ffn_size": 1536, "shard_max_mib": 1024}


class CountingHandler(model_io.ModelRequestHandler):
    """The model role's handler, counting every byte it sends: the status line and headers through
    wfile, the body through the socket's sendfile."""

    def setup(self):
        model_io.ModelRequestHandler.setup(self)
        self.wfile = _Counted(self.wfile, self.server)
        self.connection = _Counted(self.connection, self.server)


class _Counted:
    def __init__(self, raw, server):
        self.raw, self.server = raw, server

    def _count(self, count):
        with self.server.count_lock:
            self.server.sent_bytes += count or 0
        return count

    def write(self, data):
        return self._count(self.raw.write(data) or len(data))

    def sendfile(self, *args, **kwargs):
        return self._count(self.raw.sendfile(*args, **kwargs))

    def __getattr__(self, name):
        return getattr(self.raw, name)


def make_models(root):
    gguf_dir, hf_dir = os.path.join(root, "gguf"), os.path.join(root, "hf")
    opts = sm.validate_options(GGUF_OPTIONS)
    plan = sm.ModelPlan(opts, os.path.join(gguf_dir, "synthetic.gguf"), sm.builtin_vocab(), None)
    if not all(os.path.exists(p) for p in plan.paths):
        os.makedirs(gguf_dir, exist_ok=True)
        sm.write_model(plan, opts["seed"])
    if not os.path.exists(os.path.join(hf_dir, "config.json")):
        os.makedirs(hf_dir, exist_ok=True)
        sh.write_model(hf_dir, sh.ModelPlan(sh.validate_options(HF_OPTIONS)))
    sizes = {"gguf": sum(os.path.getsize(p) for p in plan.paths),
             "hf": sum(os.path.getsize(os.path.join(hf_dir, f)) for f in os.listdir(hf_dir))}
    return "gguf/" + os.path.basename(plan.paths[0]), "hf", sizes


def fake_smi(root, profile):
    path = os.path.join(root, "nvidia-smi-" + profile)
    with open(path, "w") as handle:
        handle.write('#!/bin/sh\nGPULAB_FAKE_NVIDIA_SMI_DIR=%s exec %s %s "$@"\n'
                     % (os.path.join(LAB_FILES, "nvidia-smi", profile), sys.executable,
                        os.path.join(LAB_FILES, "fake-nvidia-smi")))
    os.chmod(path, 0o755)
    return path


def inventory(root):
    def host(profile):
        return {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                "gpu_preflight_nvidia_smi_path": fake_smi(root, profile)}
    path = os.path.join(root, "inventory.json")
    with open(path, "w") as handle:
        json.dump({"all": {"children": {"gpu_nodes": {"children": {
            "inference_head": {"hosts": {"node-a": host("rtx-pro-6000-x2")}},
            "rpc_workers": {"hosts": {"node-b": host("rtx-pro-6000-x2")}}}}}}}, handle)
    return path


def plan_once(root, inv, source, output):
    started = time.monotonic()
    done = subprocess.run(["ansible-playbook", "playbooks/plan.yml", "-i", inv, "-e", "model_source=" + source,
                           "-e", "plan_output_file=" + output], cwd=REPO, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    if done.returncode != 0:
        sys.exit("plan.yml failed for %s:\n%s" % (source, done.stdout[-4000:] + done.stderr[-2000:]))
    with open(output) as handle:
        return wall, json.load(handle)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--dir", default=os.path.join(REPO, ".build", "plan-speed"))
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    root = os.path.abspath(args.dir)
    os.makedirs(root, exist_ok=True)
    started = time.monotonic()
    gguf, hf, sizes = make_models(os.path.join(root, "mirror"))
    generated_s = time.monotonic() - started
    mirror = os.path.join(root, "mirror")
    allowed = [os.path.relpath(os.path.join(d, f), mirror) for d, _s, files in os.walk(mirror) for f in files]
    server = model_io.ModelServer("127.0.0.1", 0, mirror, allowed)
    server.RequestHandlerClass = CountingHandler
    server.count_lock, server.sent_bytes = threading.Lock(), 0
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = "http://127.0.0.1:%d" % server.server_address[1]
    inv = inventory(root)
    results = {"generated_s": round(generated_s, 1), "models": []}
    try:
        for name, source in (("two-shard GGUF", "%s/%s" % (url, gguf)), ("FP8 checkpoint", "%s/%s" % (url, hf))):
            walls, sent = [], []
            for run in range(args.runs):
                before = server.sent_bytes
                wall, document = plan_once(root, inv, source, os.path.join(root, "plan-%d.json" % run))
                walls.append(round(wall, 2))
                sent.append(server.sent_bytes - before)
            results["models"].append({
                "model": name, "source": source, "format": document["format"], "engine": document["engine"]["engine"],
                "size_bytes": document["size_bytes"], "files_bytes_on_disk": sizes[document["format"]],
                "bytes_read": document["bytes_read"], "requests": document["requests"],
                "mirror_sent_bytes": sent, "read_percent": round(100.0 * max(sent) / document["size_bytes"], 4),
                "wall_s": walls, "chosen": [r.get("layout") for r in document["table"]["rows"][:1]],
                "error": document["table"].get("error")})
    finally:
        server.shutdown()
        server.server_close()
    json.dump(results, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
