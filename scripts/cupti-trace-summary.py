# managed by gpulab.inference
"""Figures per decoded token from a trace of scripts/cupti-trace.c.

    python3 scripts/cupti-trace-summary.py TRACE --vocab 151936 > summary.json

A token ends where llama.cpp copies its logits row to the host (one device-to-host copy of
vocab x 4 bytes, in llama-bench and llama-server alike), so the time between two such copies is one
token: the kernels launched in it, the GPU busy time (union of the kernels), the GPU idle time,
the host lead (from the last token's logits copy to this token's first kernel: sampling and
server work), the other copies, memsets, synchronisations and runtime calls. Decode tokens are
the intervals shorter than --max-token-ms whose kernel count is the most common one (prefill and
idle gaps between requests drop out).
"""

import argparse
import bisect
import collections
import json
import re
import statistics
import subprocess
import sys

DTOH = 2  # CUPTI_ACTIVITY_MEMCPY_KIND_DTOH


def read_trace(path):
    kernels, copies, memsets, syncs, calls = [], [], [], [], []
    with open(path, errors="replace") as stream:
        for line in stream:
            parts = line.rstrip("\n").split(" ", 5)
            kind = parts[0]
            try:
                if kind == "K":
                    kernels.append((int(parts[1]), int(parts[2]), int(parts[3]), parts[5] if len(parts) > 5 else "?"))
                elif kind == "M":
                    copies.append((int(parts[1]), int(parts[2]), int(parts[3]), int(parts[4])))
                elif kind == "Z":
                    memsets.append((int(parts[1]), int(parts[2])))
                elif kind == "S":
                    syncs.append((int(parts[1]), int(parts[2]), int(parts[3])))
                elif kind == "R":
                    calls.append((int(parts[1]), int(parts[2]), parts[4] if len(parts) > 4 else "?"))
            except (IndexError, ValueError):
                continue  # a line cut by a stopped process
    for records in (kernels, copies, memsets, syncs, calls):
        records.sort()
    return kernels, copies, memsets, syncs, calls


def short_names(names):
    """Demangled kernel names without template arguments and parameters (c++filt where present)."""
    names = sorted(names)
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True,
                             timeout=60).stdout.split("\n")
    except (OSError, subprocess.SubprocessError):
        out = names
    result = {}
    for raw, pretty in zip(names, out):
        pretty = re.sub(r"^void ", "", pretty or raw)
        result[raw] = re.split(r"[<(]", pretty, 1)[0].strip() or raw
    return result


def in_window(records, start, end):
    """Records (sorted by start) that start in (start, end]."""
    lo = bisect.bisect_right(records, (start, float("inf")))
    hi = bisect.bisect_right(records, (end, float("inf")))
    return records[lo:hi]


def busy_ns(kernels):
    total, cur_start, cur_end = 0, None, None
    for start, end, *_rest in sorted(kernels):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def med(values):
    return round(statistics.median(values), 2) if values else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("trace")
    parser.add_argument("--vocab", type=int, required=True)
    parser.add_argument("--max-token-ms", type=float, default=100.0)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    kernels, copies, memsets, syncs, calls = read_trace(args.trace)
    logits_bytes = args.vocab * 4
    marks = sorted(end for start, end, size, kind in copies if size == logits_bytes and kind == DTOH)
    tokens = []
    for prev, cur in zip(marks, marks[1:]):
        if (cur - prev) / 1e6 > args.max_token_ms:
            continue
        ks = in_window(kernels, prev, cur)
        tokens.append({"prev": prev, "end": cur, "kernels": ks})
    counts = collections.Counter(len(t["kernels"]) for t in tokens)
    if not counts:
        json.dump({"trace": args.trace, "error": "no decode tokens found (no logits copies of %d bytes)" % logits_bytes,
                   "kernels": len(kernels), "copies": len(copies)}, sys.stdout, indent=1)
        return 1
    mode = counts.most_common(1)[0][0]
    steady = [t for t in tokens if len(t["kernels"]) == mode]
    names = short_names(set(k[3] for t in steady for k in t["kernels"]))
    per_name = collections.defaultdict(lambda: [0, 0])
    rows = collections.defaultdict(list)
    api = collections.Counter()
    for t in steady:
        prev, cur, ks = t["prev"], t["end"], t["kernels"]
        busy = busy_ns(ks)
        other = [c for c in in_window(copies, prev, cur) if not (c[2] == logits_bytes and c[3] == DTOH)]
        rows["wall_us"].append((cur - prev) / 1e3)
        rows["gpu_busy_us"].append(busy / 1e3)
        rows["gpu_idle_us"].append((cur - prev - busy) / 1e3)
        rows["host_lead_us"].append((ks[0][0] - prev) / 1e3 if ks else 0)
        rows["kernels_in_graphs"].append(sum(1 for k in ks if k[2]))
        rows["other_copies"].append(len(other))
        rows["other_copy_bytes"].append(sum(c[2] for c in other))
        rows["memsets"].append(len(in_window(memsets, prev, cur)))
        rows["syncs"].append(len(in_window(syncs, prev, cur)))
        for call in in_window(calls, prev, cur):
            api[call[2]] += 1
        for k in ks:
            entry = per_name[names[k[3]]]
            entry[0] += 1
            entry[1] += k[1] - k[0]
    n = len(steady)
    top = sorted(per_name.items(), key=lambda kv: -kv[1][1])[: args.top]
    json.dump({
        "trace": args.trace,
        "token_intervals": len(tokens),
        "steady_tokens": n,
        "kernels_per_token": mode,
        "kernel_count_histogram": dict(counts.most_common(8)),
        "per_token_median": dict((k, med(v)) for k, v in rows.items()),
        "runtime_calls_per_token": dict((k, round(v / n, 2)) for k, v in api.most_common(15)),
        "kernels_by_name_per_token": [{"name": name, "count": round(c / n, 2), "us": round(ns / n / 1e3, 2)}
                                      for name, (c, ns) in top],
    }, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
