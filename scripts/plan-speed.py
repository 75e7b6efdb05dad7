# managed by gpulab.inference
"""How fast playbooks/plan.yml answers "will it fit?", and how little of the model it reads: a
two-shard synthetic GGUF and a synthetic FP8 checkpoint (the collection's own generators) served
from a mirror on 127.0.0.1 by the model role's ranged server, planned on two local nodes of two
RTX PRO 6000 each (the container lab's fake nvidia-smi profile rtx-pro-6000-x2; vLLM needs the same
GPU count on every node, so the lab's one-GPU worker would leave it no layout).

    .venv/bin/python scripts/plan-speed.py [--dir .build/plan-speed] [--runs 3]
    GPULAB_LAB_NAME=gpulab-plan GPULAB_LAB_FABRIC_PREFIX=10.231.85 make lab
    GPULAB_LAB_NAME=gpulab-plan GPULAB_LAB_FABRIC_PREFIX=10.231.85 .venv/bin/python scripts/plan-speed.py --lab

With --lab the mirror is the container lab's own nginx (molecule/lab/create.yml): the models are
generated once into its lab_mirror_host_dir (removed by `make lab-destroy`), plan.yml reads them
from lab_mirror_url over the lab's fabric bridge, and the bytes it sent are the body bytes of
this run's lines in the container's access log. --mirror-dir, --mirror-url and --mirror-container
name another such mirror by hand.

Run from the repository root with ANSIBLE_COLLECTIONS_PATH naming .build/collections. Writes
JSON: per model its size, the bytes the plan says it read, the bytes the mirror sent (headers
included on 127.0.0.1, the body alone from nginx's log), the reads, and each run's wall time of
`ansible-playbook playbooks/plan.yml`. The models are generated once and kept for the next run.
"""

import argparse
import json
import os
import re
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
LAB_INVENTORY = os.path.join(REPO, "inventory", "demo")
NGINX_LOG = "/var/log/nginx/gpulab-mirror.log"
# nginx's combined format: ... "GET /path HTTP/1.1" status body_bytes_sent "referer" "agent"
COMBINED_LINE = re.compile(r'"(?P<method>[A-Z]+) (?P<path>\S+) [^"]*" (?P<status>\d{3}) (?P<body_bytes>\d+) ')
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


class LocalMirror:
    """The model role's ranged server on 127.0.0.1, counting what it sends, headers included."""

    counted = "status line, headers and body, as the server wrote them"

    def __init__(self, root):
        allowed = [os.path.relpath(os.path.join(d, f), root) for d, _s, files in os.walk(root) for f in files]
        self.server = model_io.ModelServer("127.0.0.1", 0, root, allowed)
        self.server.RequestHandlerClass = CountingHandler
        self.server.count_lock, self.server.sent_bytes, self.server.requests = threading.Lock(), 0, 0
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]

    def mark(self):
        return self.server.sent_bytes

    def since(self, mark):
        return self.server.sent_bytes - mark, None

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class NginxMirror:
    """The lab's nginx mirror: what it sent is read from its access log, this run's lines only
    (the log's length before a run marks where they start)."""

    counted = "body bytes of nginx's access log ($body_bytes_sent), headers not included"

    def __init__(self, url, container):
        self.url, self.container = url.rstrip("/"), container

    def _log(self):
        done = subprocess.run(["podman", "exec", self.container, "cat", NGINX_LOG], capture_output=True, check=False)
        if done.returncode != 0:
            sys.exit("cannot read the mirror's access log (podman exec %s cat %s): %s"
                     % (self.container, NGINX_LOG, done.stderr.decode(errors="replace").strip()))
        return done.stdout

    def mark(self):
        return len(self._log())

    def since(self, mark):
        lines = self._log()[mark:].decode(errors="replace").splitlines()
        hits = [m for m in (COMBINED_LINE.search(line) for line in lines) if m]
        if len(hits) != len(lines):
            sys.exit("unexpected lines in the mirror's access log: %r" % lines)
        return sum(int(m.group("body_bytes")) for m in hits), [
            "%s %s %s %s" % (m.group("method"), m.group("path"), m.group("status"), m.group("body_bytes")) for m in hits]

    def close(self):
        pass


def lab_mirror():
    """lab_mirror_host_dir, lab_mirror_url and lab_mirror_container_name as the lab's inventory
    renders them (GPULAB_LAB_NAME and GPULAB_LAB_FABRIC_PREFIX included); debug runs on the
    controller, so no node is contacted."""
    names = ["lab_mirror_host_dir", "lab_mirror_url", "lab_mirror_container_name"]
    env = dict(os.environ, ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json")
    done = subprocess.run(["ansible", "node-a", "-i", LAB_INVENTORY, "-m", "ansible.builtin.debug",
                           "-a", "msg={{ [%s] }}" % ", ".join(names)], cwd=REPO, env=env, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        sys.exit("cannot read the lab's mirror from %s:\n%s" % (LAB_INVENTORY, done.stdout[-2000:] + done.stderr[-2000:]))
    values = json.loads(done.stdout)["plays"][0]["tasks"][0]["hosts"]["node-a"]["msg"]
    return dict(zip(names, values))


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
    parser.add_argument("--lab", action="store_true",
                        help="the container lab's nginx mirror, named by inventory/demo (GPULAB_LAB_NAME, GPULAB_LAB_FABRIC_PREFIX)")
    parser.add_argument("--mirror-dir", help="the directory an nginx mirror serves (the models are generated there)")
    parser.add_argument("--mirror-url", help="the URL that serves --mirror-dir")
    parser.add_argument("--mirror-container", help="the podman container of the nginx mirror, for its access log")
    args = parser.parse_args()
    root = os.path.abspath(args.dir)
    os.makedirs(root, exist_ok=True)
    if args.lab:
        lab = lab_mirror()
        args.mirror_dir = args.mirror_dir or lab["lab_mirror_host_dir"]
        args.mirror_url = args.mirror_url or lab["lab_mirror_url"]
        args.mirror_container = args.mirror_container or lab["lab_mirror_container_name"]
    given = [args.mirror_dir, args.mirror_url, args.mirror_container]
    if any(given) and not all(given):
        parser.error("--mirror-dir, --mirror-url and --mirror-container go together (or --lab for all three)")
    models_dir = os.path.abspath(args.mirror_dir) if args.mirror_dir else os.path.join(root, "mirror")
    started = time.monotonic()
    gguf, hf, sizes = make_models(models_dir)
    generated_s = time.monotonic() - started
    mirror = NginxMirror(args.mirror_url, args.mirror_container) if args.mirror_dir else LocalMirror(models_dir)
    inv = inventory(root)
    results = {"generated_s": round(generated_s, 1), "models_dir": models_dir, "mirror_url": mirror.url,
               "mirror_counted": mirror.counted, "models": []}
    try:
        for name, source in (("two-shard GGUF", "%s/%s" % (mirror.url, gguf)), ("FP8 checkpoint", "%s/%s" % (mirror.url, hf))):
            walls, sent, logged = [], [], []
            for run in range(args.runs):
                mark = mirror.mark()
                wall, document = plan_once(root, inv, source, os.path.join(root, "plan-%d.json" % run))
                walls.append(round(wall, 2))
                sent_bytes, lines = mirror.since(mark)
                sent.append(sent_bytes)
                logged.append(lines)
            entry = {
                "model": name, "source": source, "format": document["format"], "engine": document["engine"]["engine"],
                "size_bytes": document["size_bytes"], "files_bytes_on_disk": sizes[document["format"]],
                "bytes_read": document["bytes_read"], "requests": document["requests"],
                "mirror_sent_bytes": sent, "read_percent": round(100.0 * max(sent) / document["size_bytes"], 4),
                "wall_s": walls, "chosen": [r.get("layout") for r in document["table"]["rows"][:1]],
                "error": document["table"].get("error")}
            if logged[0] is not None:
                entry["mirror_requests"] = [len(run_lines) for run_lines in logged]
                entry["mirror_log_last_run"] = logged[-1]
            results["models"].append(entry)
    finally:
        mirror.close()
    json.dump(results, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
