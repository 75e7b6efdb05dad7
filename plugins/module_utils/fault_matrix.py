# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fault matrix's figures (scripts/faults.py, `make faults`): from the steady load's request log
and the times a fault began and was seen, how long serving stopped, how many requests failed, and
what the next deploy.yml reported; and the table of docs/faults.md.

A request is a dict: start (epoch seconds), end, ok (bool), error (text). Pure functions: the script
collects the times and the log, these turn them into the table's numbers.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re


class FaultMatrixError(Exception):
    pass


def serving_again_after(requests, fault_at, until):
    """Seconds from fault_at to the start of the first request that succeeded with no failed request
    started after it (up to until); 0.0 when no request failed; None when serving never came back."""
    window = sorted((r for r in requests if fault_at <= r['start'] <= until), key=lambda r: r['start'])
    failed = [r for r in window if not r['ok']]
    if not failed:
        return 0.0
    last_failure = failed[-1]['start']
    after = [r for r in window if r['ok'] and r['start'] > last_failure]
    if not after:
        return None
    return round(after[0]['start'] - fault_at, 1)


def failed_during(requests, start, end):
    """(sent, failed) of the requests started within [start, end]."""
    window = [r for r in requests if start <= r['start'] <= end]
    return len(window), sum(1 for r in window if not r['ok'])


def failed_outside(requests, windows):
    """Failed requests started outside every (start, end) window: the soak's 'lost outside faults'."""
    def inside(request):
        return any(start <= request['start'] <= end for start, end in windows)
    return sum(1 for r in requests if not r['ok'] and not inside(r))


def percentile(values, fraction):
    """The nearest-rank percentile (fraction 0.5, 0.99) of values; None when there are none."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = max(1, int(-(-fraction * len(ordered) // 1)))
    return ordered[min(rank, len(ordered)) - 1]


RECAP = re.compile(r'^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)\s+'
                   r'failed=(?P<failed>\d+)', re.M)


def recap_changed(stats):
    """'changed=N' of one playbook run from ansible-runner's stats ({'changed': {host: n}, 'failures': ...}):
    (changed per host, failed hosts)."""
    changed = dict((host, int(n)) for host, n in (stats.get('changed') or {}).items())
    failed = sorted(set(stats.get('failures') or {}) | set(stats.get('dark') or {}))
    for host in stats.get('ok') or {}:
        changed.setdefault(host, 0)
    return changed, failed


def recap_text(stats):
    """'changed=4/2/2' (hosts in name order), with ' failed on X' where a host failed."""
    changed, failed = recap_changed(stats)
    if not changed and not failed:
        return 'no run'
    text = 'changed=' + '/'.join(str(changed[h]) for h in sorted(changed))
    return text + (' failed on %s' % ', '.join(failed) if failed else '')


def seconds(value):
    return '-' if value is None else ('%.1f' % value)


COLUMNS = ('case', 'node', 'manager', 'detected after (s)', 'serving again after (s)', 'requests failed / sent',
           'lost', 'next deploy.yml', 'then', 'notes')


def table(rows):
    """The Markdown table of docs/faults.md; a row is a dict with the keys below."""
    lines = ['| ' + ' | '.join(COLUMNS) + ' |', '|' + '---|' * len(COLUMNS)]
    for row in rows:
        cells = [row['case'], row['node'], row['manager'], seconds(row.get('detected_s')),
                 seconds(row.get('serving_again_s')) if row.get('serving_again_s', 0) is not None else 'not within the case',
                 '%d / %d' % (row.get('failed', 0), row.get('sent', 0)), row.get('lost') or 'nothing',
                 row.get('deploy_1') or '-', row.get('deploy_2') or '-', row.get('notes', '')]
        lines.append('| ' + ' | '.join(str(c).replace('|', '\\|').replace('\n', ' ') for c in cells) + ' |')
    return '\n'.join(lines)


# --- the controller killed, the disk filled -----------------------------------------------------

def drain_recorded(text):
    """(phase, [names]) of a drain state file's text (gpu_drain: phase stopping or drained, entries
    with name or key); (None, []) when there is no file or it cannot be read."""
    try:
        state = json.loads(text) if text and text.strip() else None
    except ValueError:
        return None, []
    if not isinstance(state, dict):
        return None, []
    names = [entry.get('name') or entry.get('key') for entry in state.get('entries') or [] if isinstance(entry, dict)]
    return state.get('phase'), names


def lost_services(expected, active):
    """What a fault lost: expected {node: [unit]} that ran before it, active {node: [unit]} running
    after the recovery; 'nothing', or 'unit on node, ...' for each one not running again."""
    lost = ['%s on %s' % (unit, node) for node in sorted(expected) for unit in expected[node]
            if unit not in set(active.get(node) or [])]
    return ', '.join(lost) if lost else 'nothing'


TASK_LINE = re.compile(r'^TASK \[(?P<name>[^\]]*)\]', re.M)


def task_started_after(output, marker):
    """Whether ansible-playbook's output shows a task started after the last task whose banner
    contains marker (the kill of the controller 'during the next step')."""
    names = [m.group('name') for m in TASK_LINE.finditer(output)]
    seen = [i for i, name in enumerate(names) if marker in name]
    return bool(seen) and seen[-1] < len(names) - 1


PLAY_LINE = re.compile(r'^PLAY \[(?P<name>[^\]]*)\]', re.M)


def task_in_play(output, play, marker):
    """Whether ansible-playbook's output shows a task whose banner contains marker begun in the
    last play whose banner contains play (the kill of the controller 'in that play'): a task of
    the same name in an earlier play does not count."""
    plays = [m for m in PLAY_LINE.finditer(output) if play in m.group('name')]
    if not plays:
        return False
    after = output[plays[-1].end():]
    following = PLAY_LINE.search(after)
    within = after[:following.start()] if following else after
    return any(marker in m.group('name') for m in TASK_LINE.finditer(within))


def missing_from(message, needles):
    """The needles (node, path) a failure message does not name; [] when it names them all."""
    return [needle for needle in needles if needle not in (message or '')]
