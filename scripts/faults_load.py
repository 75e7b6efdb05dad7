#!/usr/bin/env python3
"""Steady load for the fault matrix (scripts/faults.py), run on the head node itself (loopback only):
one chat completion every --interval-s seconds, each in its own thread (a hung request does not
delay the next one), at most --concurrency at a time (a request due while that many are in flight
counts as failed: 'over concurrency'), each with a --timeout-s bound. One JSON line per request to
--out: start, end (epoch s), ok, error, ttft_s (time to the first streamed token)."""

import argparse
import json
import threading
import time
import urllib.request


def one(url, timeout_s, out, lock):
    start = time.time()
    body = json.dumps({'messages': [{'role': 'user', 'content': 'Say hello.'}], 'max_tokens': 4,
                       'stream': True}).encode()
    record = {'start': start, 'ok': False, 'error': '', 'ttft_s': None}
    try:
        request = urllib.request.Request(url + '/v1/chat/completions', data=body,
                                         headers={'Content-Type': 'application/json'})
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            tokens = 0
            for line in answer:
                if line.startswith(b'data: ') and b'"content"' in line and record['ttft_s'] is None:
                    record['ttft_s'] = round(time.time() - start, 3)
                if line.startswith(b'data: ') and b'"content"' in line:
                    tokens += 1
                if time.time() - start > timeout_s:
                    raise TimeoutError('no end within %d s' % timeout_s)
            record['ok'] = tokens > 0
            if not tokens:
                record['error'] = 'no token'
    except Exception as exc:  # pylint: disable=broad-except  # every failure is a figure
        record['error'] = '%s: %s' % (type(exc).__name__, exc)
    record['end'] = time.time()
    with lock:
        out.write(json.dumps(record) + '\n')
        out.flush()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--url', default='http://127.0.0.1:8080')
    parser.add_argument('--interval-s', type=float, default=1.0)
    parser.add_argument('--concurrency', type=int, default=32)
    parser.add_argument('--timeout-s', type=float, default=30.0)
    parser.add_argument('--duration-s', type=float, default=3600.0)
    parser.add_argument('--workers', type=int, default=0,
                        help='closed loop instead: this many threads, each sending its next request when one ends')
    parser.add_argument('--out', required=True)
    args = parser.parse_args()
    lock = threading.Lock()
    if args.workers:
        ends = time.time() + args.duration_s
        with open(args.out, 'a') as out:
            def worker():
                while time.time() < ends:
                    began = time.time()
                    one(args.url, args.timeout_s, out, lock)
                    time.sleep(max(0.0, 0.2 - (time.time() - began)))  # a failing head is not hammered
            threads = [threading.Thread(target=worker) for dummy in range(args.workers)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        return
    threads = []
    ends = time.time() + args.duration_s
    with open(args.out, 'a') as out:
        next_at = time.time()
        while time.time() < ends:
            threads = [t for t in threads if t.is_alive()]
            if len(threads) >= args.concurrency:
                with lock:
                    out.write(json.dumps({'start': time.time(), 'end': time.time(), 'ok': False,
                                          'error': 'over concurrency', 'ttft_s': None}) + '\n')
                    out.flush()
            else:
                thread = threading.Thread(target=one, args=(args.url, args.timeout_s, out, lock))
                thread.daemon = True
                thread.start()
                threads.append(thread)
            next_at += args.interval_s
            time.sleep(max(0.0, next_at - time.time()))


if __name__ == '__main__':
    main()
