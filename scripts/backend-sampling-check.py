# managed by gpulab.inference
"""Backend sampling against host sampling on one llama-server, through each request's own
`backend_sampling` field (tools/server/server-schema.cpp), so both run on the same server and model.

    python3 scripts/backend-sampling-check.py http://127.0.0.1:8080 > check.json

Greedy requests, alone and with the penalties a chat client sends, must return exactly the same
tokens either way; the default chain and the samplers a chat client sends must return every token
asked for with backend sampling on; samplers without a device implementation (DRY, typical, XTC,
mirostat) and n_probs must still answer (llama.cpp runs them on the CPU). Exits 1 when a check fails.
"""

import json
import sys
import urllib.request

PROMPT = "The history of the printing press begins"
N_PREDICT = 48
CASES = [
    # (name, request fields, the tokens must be equal with and without backend sampling)
    ("greedy", {"temperature": 0}, True),
    ("greedy_penalties", {"temperature": 0, "repeat_penalty": 1.3, "presence_penalty": 0.5,
                          "frequency_penalty": 0.5, "repeat_last_n": 64}, True),
    ("server_default_chain", {"seed": 7}, False),
    ("chat_client", {"temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 7}, False),
    ("dry_cpu_fallback", {"temperature": 0.7, "dry_multiplier": 0.8, "seed": 7}, False),
    ("typical_xtc_cpu_fallback", {"temperature": 0.7, "typical_p": 0.9, "xtc_probability": 0.5, "seed": 7}, False),
    ("mirostat_cpu_fallback", {"mirostat": 2, "seed": 7}, False),
    ("n_probs", {"temperature": 0, "n_probs": 3}, True),
]


def complete(base_url, fields, backend):
    body = dict(prompt=PROMPT, n_predict=N_PREDICT, ignore_eos=True, cache_prompt=False,
                return_tokens=True, backend_sampling=backend, **fields)
    request = urllib.request.Request(base_url.rstrip("/") + "/completion", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        data = json.loads(response.read())
    return {"tokens": data.get("tokens") or [], "tok_s": round(data.get("timings", {}).get("predicted_per_second", 0), 1)}


def main():
    base_url = sys.argv[1]
    results, failed = [], []
    for name, fields, must_match in CASES:
        on, off = complete(base_url, fields, True), complete(base_url, fields, False)
        row = {"case": name, "fields": fields, "tokens_on": len(on["tokens"]), "tokens_off": len(off["tokens"]),
               "same_tokens": on["tokens"] == off["tokens"], "tok_s_on": on["tok_s"], "tok_s_off": off["tok_s"]}
        if len(on["tokens"]) != N_PREDICT or len(off["tokens"]) != N_PREDICT:
            failed.append("%s: %d / %d tokens of %d" % (name, len(on["tokens"]), len(off["tokens"]), N_PREDICT))
        if must_match and not row["same_tokens"]:
            first = next(i for i, (a, b) in enumerate(zip(on["tokens"], off["tokens"])) if a != b)
            failed.append("%s: the tokens differ from position %d" % (name, first))
        results.append(row)
    json.dump({"cases": results, "failed": failed, "passed": not failed}, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
