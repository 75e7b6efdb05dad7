# managed by gpulab.inference
"""deploy.yml over SSH on the container lab, measured in one run (issue 22's goals):

    GPULAB_LAB_NAME=gpulab-x GPULAB_LAB_FABRIC_PREFIX=10.231.90 python3 scripts/ssh-deploy-bench.py

1. a fresh lab (molecule/lab/destroy.yml, then create.yml), so the first deploy is cold;
2. deploy.yml with the benchmark step off, cold, then again: the second must change nothing;
3. the llama.cpp tarball shipped to the peers by llama_cpp_distribute (its copy task, from
   ansible-runner's per-host start and end) against `scp` of the same tarball from the controller
   to the same peers, at the same time, over the same SSH settings and connection (the
   ControlMaster that ansible opened), repeated --scp-rounds times.

Playbooks run through ansible-runner; the only network traffic is to the lab's containers.
Prints a JSON summary (also written to --out); exits 1 when the no-op deploy changed something.
--keep-lab leaves the lab up (default: removed at the end).
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ansible_runner

REPO = Path(__file__).resolve().parents[1]
INVENTORY = REPO / "inventory" / "demo"
DISTRIBUTE_ROLE = "llama_cpp_distribute"
COPY_TASK = "Copy the tarball from the controller"
BUILD_ROLE = "llama_cpp_build"
SCP_DEST = "/tmp/gpulab-scp-bench.tar.gz"


# ---- pure functions over ansible-runner events (tests/unit/scripts/test_ssh_deploy_bench.py) ----

def _stamp(text):
    return datetime.datetime.fromisoformat(text).timestamp()


def host_results(events):
    """event_data of every finished task on a host (ok or failed), in order."""
    return [e["event_data"] for e in events
            if e.get("event") in ("runner_on_ok", "runner_on_failed") and "start" in e.get("event_data", {})]


def task_span(events, task, role=None, hosts=None):
    """Wall time of one task across hosts: from the first host's start to the last host's end,
    with each host's own duration; None when the task did not run there."""
    rows = [d for d in host_results(events) if d.get("task") == task
            and (role is None or d.get("role", "").split(".")[-1] == role)
            and (hosts is None or d["host"] in hosts)]
    if not rows:
        return None
    start = min(_stamp(d["start"]) for d in rows)
    end = max(_stamp(d["end"]) for d in rows)
    return {"wall_s": round(end - start, 3),
            "hosts": {d["host"]: round(float(d["duration"]), 3) for d in rows}}


def role_span(events, role, hosts=None):
    """Wall time from the first to the last finished task of a role (its includes and waits in between)."""
    rows = [d for d in host_results(events) if d.get("role", "").split(".")[-1] == role
            and (hosts is None or d["host"] in hosts)]
    if not rows:
        return None
    return round(max(_stamp(d["end"]) for d in rows) - min(_stamp(d["start"]) for d in rows), 3)


def slowest_tasks(events, count=10):
    """(task, wall seconds across hosts) of the slowest tasks, slowest first; one entry per task
    of the playbook (its task_uuid), so a role's task that runs in several plays counts per play."""
    spans = {}
    for data in host_results(events):
        start, end = _stamp(data["start"]), _stamp(data["end"])
        task, first, last = spans.get(data["task_uuid"], (data["task"], start, end))
        spans[data["task_uuid"]] = (task, min(first, start), max(last, end))
    walls = [(task, round(last - first, 3)) for task, first, last in spans.values()]
    return sorted(walls, key=lambda item: -item[1])[:count]


def rate_mb_s(size_bytes, copies, seconds):
    """Megabytes (10^6) per second of `copies` copies of size_bytes in seconds."""
    return round(size_bytes * copies / seconds / 1e6, 1)


# ---- the run ----------------------------------------------------------------------------------

def run_playbook(playbook, extravars=None):
    private = Path(tempfile.mkdtemp(prefix="gpulab-ssh-bench-"))
    envvars = {
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".build" / "collections"),
        "ANSIBLE_NOCOLOR": "1",
    }
    started = time.monotonic()
    runner = ansible_runner.run(private_data_dir=str(private), playbook=str(REPO / playbook),
                                inventory=str(INVENTORY), extravars=extravars or {}, envvars=envvars,
                                quiet=True)
    wall = round(time.monotonic() - started, 1)
    events = list(runner.events)
    if runner.status != "successful":
        failed = [(d["host"], d["task"], d["res"].get("msg", "")) for d in host_results(events)
                  if d.get("res", {}).get("failed")]
        sys.exit("%s: %s (rc %s) %s; runner data under %s" % (playbook, runner.status, runner.rc, failed, private))
    stats = runner.stats
    shutil.rmtree(private, ignore_errors=True)
    return {"wall_s": wall, "stats": stats, "events": events}


def lab_facts():
    """How the controller reaches each node (the inventory's own values, templated by ansible)."""
    playbook = Path(tempfile.mkdtemp(prefix="gpulab-ssh-bench-")) / "facts.yml"
    playbook.write_text(json.dumps([{
        "name": "Connection settings", "hosts": "gpu_nodes", "gather_facts": False,
        "tasks": [{"name": "Show them", "ansible.builtin.debug": {"msg": {
            "host": "{{ ansible_host | default(inventory_hostname) }}", "user": "{{ ansible_user }}",
            "key": "{{ ansible_ssh_private_key_file | default('') }}",
            "common_args": "{{ ansible_ssh_common_args }}",
            "cache": "{{ llama_cpp_distribute_controller_cache }}", "ccache": "{{ lab_ccache_host_dir }}"}}}]}]))
    run = run_playbook(str(playbook))
    shutil.rmtree(playbook.parent, ignore_errors=True)
    return {d["host"]: d["res"]["msg"] for d in host_results(run["events"])}


def ssh_argv(tool, node):
    """scp's or ssh's options as ansible's ssh connection builds them: ansible.cfg's ssh_args and
    control path (so the connection ansible opened is reused), then the inventory's arguments."""
    control_path = os.path.expanduser("~/.ansible/cp/%C")
    args = [tool, "-o", "ControlMaster=auto", "-o", "ControlPersist=120s", "-o", "ControlPath=" + control_path,
            "-o", "BatchMode=yes"] + (["-i", node["key"]] if node["key"] else []) + ["-o", "User=" + node["user"]]
    return args + node["common_args"].split()


def scp_round(tarball, nodes):
    """scp of the tarball to every node at once; wall seconds until the last one finished."""
    started = time.monotonic()
    procs = [subprocess.Popen(ssh_argv("scp", node) + ["-q", str(tarball), "%s:%s" % (node["host"], SCP_DEST)])
             for node in nodes]
    codes = [proc.wait() for proc in procs]
    wall = time.monotonic() - started
    if any(codes):
        sys.exit("scp failed: exit codes %s" % codes)
    for node in nodes:
        subprocess.run(ssh_argv("ssh", node) + [node["host"], "rm", "-f", SCP_DEST], check=True)
    return round(wall, 3)


def du_bytes(path):
    out = subprocess.run(["du", "-sb", path], capture_output=True, text=True, check=False).stdout.split()
    return int(out[0]) if out else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--keep-lab", action="store_true", help="leave the lab up at the end")
    parser.add_argument("--scp-rounds", type=int, default=3)
    parser.add_argument("--out", help="write the JSON summary here too")
    options = parser.parse_args()

    nodes = lab_facts()
    head = sorted(nodes)[0]
    peers = [name for name in sorted(nodes) if name != head]
    cache = Path(nodes[head]["cache"])
    summary = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "machine": "%s, %d cores, %s" % (platform.node(), os.cpu_count(), platform.platform()),
               "lab": os.environ.get("GPULAB_LAB_NAME", "gpulab"),
               "caches_before": {"ccache_bytes": du_bytes(nodes[head]["ccache"]),
                                 "controller_tarballs": sorted(p.name for p in cache.glob("*.tar.gz"))},
               "load_before": os.getloadavg()}

    run_playbook("molecule/lab/destroy.yml")
    summary["lab_create_s"] = run_playbook("molecule/lab/create.yml")["wall_s"]
    try:
        cold = run_playbook("deploy.yml", {"gpulab_bench_enabled": False})
        noop = run_playbook("deploy.yml", {"gpulab_bench_enabled": False})
        copy = task_span(cold["events"], COPY_TASK, DISTRIBUTE_ROLE, peers)
        if copy is None or sorted(copy["hosts"]) != peers:
            sys.exit("the cold deploy did not ship the build to %s: %s" % (peers, copy))
        build_id = next(d["res"]["build_id"] for d in host_results(cold["events"])
                        if d["task"] == "Read the build current points at and judge it against the build host's")
        tarball = cache / ("%s.tar.gz" % build_id)
        size = tarball.stat().st_size
        # Warm the ControlMaster connections as ansible left them, then the same bytes by scp.
        for name in peers:
            subprocess.run(ssh_argv("ssh", nodes[name]) + [nodes[name]["host"], "true"], check=True)
        scp = [scp_round(tarball, [nodes[name] for name in peers]) for _round in range(options.scp_rounds)]
    finally:
        if not options.keep_lab:
            run_playbook("molecule/lab/destroy.yml")

    scp_s = statistics.median(scp)
    summary.update({
        "cold_deploy": {"wall_s": cold["wall_s"], "changed": cold["stats"]["changed"],
                        "build_role_s": role_span(cold["events"], BUILD_ROLE),
                        "distribute_role_s": role_span(cold["events"], DISTRIBUTE_ROLE),
                        "slowest_tasks": slowest_tasks(cold["events"])},
        "noop_deploy": {"wall_s": noop["wall_s"], "changed": noop["stats"]["changed"],
                        "slowest_tasks": slowest_tasks(noop["events"])},
        "noop_over_cold": round(noop["wall_s"] / cold["wall_s"], 3),
        "ship": {"build_id": build_id, "tarball_bytes": size, "peers": peers,
                 "copy_task": copy, "copy_mb_s": rate_mb_s(size, len(peers), copy["wall_s"]),
                 "transfer_steps_s": role_span([e for e in cold["events"]
                                                if "transfer.yml" in e.get("event_data", {}).get("task_path", "")],
                                               DISTRIBUTE_ROLE, peers),
                 "scp_rounds_s": scp, "scp_mb_s": rate_mb_s(size, len(peers), scp_s),
                 "copy_over_scp": round(scp_s / copy["wall_s"], 3)},
        "load_after": os.getloadavg(),
    })
    text = json.dumps(summary, indent=1)
    print(text)
    if options.out:
        Path(options.out).write_text(text + "\n")
    if any(noop["stats"]["changed"].values()):
        sys.exit("the second deploy changed something: %s" % noop["stats"]["changed"])


if __name__ == "__main__":
    main()
