# managed by gpulab.inference
"""Decode speed of one llama-server as the server itself times it: requests sent one after the
other (concurrency 1), each with a prompt of token ids, a fixed number of tokens to generate and
greedy sampling; the figures are the server's own `timings` of each response
(tools/server/server-task.cpp), so HTTP and the client add nothing.

    python3 scripts/served-speed.py http://127.0.0.1:8080 --prompt-tokens 128 --n-predict 128 \
        --requests 5 --warmup 1 [--field backend_sampling=true] [--chat] [--stream] > served.json

--chat sends a chat completion (/v1/chat/completions, a user message of about --prompt-tokens
words, max_tokens) instead of /completion; --stream asks for server-sent events and reads the
timings from the last event that carries them, as a chat client streams.

Writes JSON: each request's tokens per second and milliseconds per token, their median, minimum
and maximum. Exits 1 when a request returns fewer tokens than asked for.
"""

import argparse
import json
import statistics
import sys
import urllib.request

# Token ids of the prompt: any ids inside every vocabulary the harness uses (qwen2: 151,936).
FIRST_PROMPT_ID = 1000


def request_body(prompt_tokens, n_predict, chat, stream):
    body = dict(temperature=0, ignore_eos=True, cache_prompt=False, stream=stream)
    if chat:
        body.update(messages=[{"role": "user", "content": "word " * prompt_tokens}], max_tokens=n_predict)
    else:
        body.update(prompt=list(range(FIRST_PROMPT_ID, FIRST_PROMPT_ID + prompt_tokens)), n_predict=n_predict)
    return body


def streamed_timings(lines):
    """The `timings` of the last server-sent event that carries them."""
    timings = None
    for raw in lines:
        line = raw.decode("utf-8", "replace").strip()
        if line.startswith("data: ") and line != "data: [DONE]":
            event = json.loads(line[len("data: "):])
            timings = event.get("timings", timings)
    return timings


def complete(base_url, prompt_tokens, n_predict, fields, timeout_s, chat=False, stream=False):
    body = request_body(prompt_tokens, n_predict, chat, stream)
    body.update(fields)
    path = "/v1/chat/completions" if chat else "/completion"
    request = urllib.request.Request(base_url.rstrip("/") + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        timings = streamed_timings(response) if stream else json.loads(response.read()).get("timings")
    if not timings:
        raise SystemExit("%s answered without timings" % path)
    return timings


def field(text):
    name, _equals, value = text.partition("=")
    try:
        return name, json.loads(value)
    except ValueError:
        return name, value


def summary(values):
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("base_url")
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--n-predict", type=int, default=128)
    parser.add_argument("--requests", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--timeout-s", type=float, default=300)
    parser.add_argument("--chat", action="store_true", help="/v1/chat/completions instead of /completion")
    parser.add_argument("--stream", action="store_true", help="server-sent events, as chat clients ask")
    parser.add_argument("--field", type=field, action="append", default=[],
                        help="one more request field, NAME=JSON value (repeatable)")
    args = parser.parse_args()
    fields = dict(args.field)

    def one():
        return complete(args.base_url, args.prompt_tokens, args.n_predict, fields, args.timeout_s, args.chat, args.stream)
    for _warmup in range(args.warmup):
        one()
    rows = []
    for _request in range(args.requests):
        t = one()
        rows.append({"predicted_n": t["predicted_n"], "tok_s": round(t["predicted_per_second"], 3),
                     "ms_per_token": round(t["predicted_per_token_ms"], 4), "prompt_n": t["prompt_n"],
                     "prompt_tok_s": round(t["prompt_per_second"], 1)})
    short = [r for r in rows if r["predicted_n"] != args.n_predict]
    json.dump({"prompt_tokens": args.prompt_tokens, "n_predict": args.n_predict, "fields": fields,
               "endpoint": "chat" if args.chat else "completion", "stream": args.stream,
               "requests": rows, "tok_s": summary([r["tok_s"] for r in rows]),
               "ms_per_token": summary([r["ms_per_token"] for r in rows]),
               "short_responses": len(short)}, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 1 if short else 0


if __name__ == "__main__":
    sys.exit(main())
