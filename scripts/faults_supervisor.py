"""What scripts/gpu-e2e-faults.sh reads and writes for the supervisord fault cases on a GPU host: a
deploy.yml log's recap, the memory plan's reservation lines, the failed task's message, the kept
services' history, and each case's row from the steady load's request log (the figures of
module_utils/fault_matrix.py, the table of docs/faults.md).

  python3 scripts/faults_supervisor.py recap DEPLOY_LOG
  python3 scripts/faults_supervisor.py reserved DEPLOY_LOG PATTERN
  python3 scripts/faults_supervisor.py failure DEPLOY_LOG LIMIT
  python3 scripts/faults_supervisor.py mentions DEPLOY_LOG TASK WORD
  python3 scripts/faults_supervisor.py history KEPT_HISTORY_FILE PATTERN
  python3 scripts/faults_supervisor.py row --results ROWS --load LOAD_LOG --fault-at T --until T --set case=... --check name=yes
  python3 scripts/faults_supervisor.py update --results ROWS --id ID --set deploy_1=...
  python3 scripts/faults_supervisor.py write --results ROWS --out OUTDIR --meta key=value ...
"""

import argparse
import importlib.util
import json
import os
import re
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _module_util(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, 'plugins', 'module_utils', name + '.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fault_matrix = _module_util('fault_matrix')

NUMBERS = ('detected_s', 'serving_again_s', 'took_s')


def recap(text):
    """'changed=N' of the last PLAY RECAP in a playbook's output, ' failed on HOST' added where a
    host failed or was unreachable; 'no recap' when the run ended before one (a timeout)."""
    found = {}
    for match in fault_matrix.RECAP.finditer(text):
        found[match.group('host')] = match
    if not found:
        return 'no recap'
    stats = {'changed': {}, 'failures': {}, 'dark': {}}
    for host, match in found.items():
        stats['changed'][host] = int(match.group('changed'))
        if int(match.group('failed')):
            stats['failures'][host] = int(match.group('failed'))
        if int(match.group('unreachable')):
            stats['dark'][host] = int(match.group('unreachable'))
    return fault_matrix.recap_text(stats)


def reservation_lines(text, pattern):
    """The memory plan's lines reserving a kept service's room (module_utils/kept_room.reserve):
    '<pattern>: <n> MiB reserved on GPU <i> (<figure> MiB from <source>; <state>)', each once. The
    output's YAML folds long strings over lines: whitespace is collapsed first."""
    found = []
    line = re.compile(r'%s: \d+ MiB reserved on GPU \S+ \(\d+ MiB from .*?; (?:not running now|running with \d+ MiB now)\)'
                      % re.escape(pattern))
    for match in line.finditer(' '.join(text.split())):
        if match.group(0) not in found:
            found.append(match.group(0))
    return found


TASK = re.compile(r'^TASK \[(?P<name>.*)\] \**$', re.M)
HEADER = re.compile(r'^(?:TASK|PLAY|RUNNING HANDLER|NO MORE HOSTS)\b', re.M)


def task_blocks(text, name):
    """The output of each task whose title contains name, in order, up to the next task or play."""
    blocks = []
    for head in TASK.finditer(text):
        if name in head.group('name'):
            end = HEADER.search(text, head.end())
            blocks.append(text[head.end():end.start() if end else len(text)])
    return blocks


def mentions(text, task, word):
    """The items of a task's output (a debug message's list, whitespace collapsed) that contain word,
    for each task whose title contains task; [] when none does."""
    found = []
    for block in task_blocks(text, task):
        for item in ' '.join(block.split()).split(' - '):
            if word in item:
                found.append(item.strip().strip('\'"'))
    return found


def failure(text, limit=0):
    """The message of the last 'FAILED!' in a playbook's output (whitespace collapsed; the failed
    task's title where it has none), cut at a word within limit characters (0: whole); '' when
    nothing failed. The rescue's message names the step that failed."""
    at = text.rfind('FAILED! =>')
    if at < 0:
        return ''
    heads = [head for head in TASK.finditer(text) if head.start() < at]
    title = heads[-1].group('name') if heads else ''
    after = text[at + len('FAILED! =>'):]
    end = HEADER.search(after)
    body = ' '.join(after[:end.start() if end else len(after)].split())
    said = body.split('msg: ', 1)[1].strip(' \'"') if 'msg: ' in body else title
    if limit and len(said) > limit:
        said = said[:limit].rsplit(' ', 1)[0] + ' ...'
    return said


def kept_history(text, pattern):
    """{gpu index: MiB}, seen_at of one pattern in the kept services' history (gpulab_kept_history_file,
    docs/CONTRACTS.md); ({}, None) when the file or the pattern has none."""
    try:
        document = json.loads(text or '{}')
    except ValueError:
        return {}, None
    services = document.get('services') if isinstance(document, dict) else None
    entry = (services or {}).get(pattern) if isinstance(services, dict) else None
    if not isinstance(entry, dict):
        return {}, None
    return dict((str(k), int(v)) for k, v in (entry.get('gpus') or {}).items()), entry.get('seen_at')


def read_requests(path):
    """The steady load's records (scripts/faults_load.py); a line cut by a kill is skipped."""
    rows = []
    if not path or not os.path.exists(path):
        return rows
    with open(path) as handle:
        for line in handle:
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
    return rows


def parse_pairs(pairs):
    """KEY=VALUE texts to a dict: VALUE of a number field (NUMBERS) as a float, '' or 'none' as None."""
    out = {}
    for pair in pairs or []:
        key, dummy, value = pair.partition('=')
        if key in NUMBERS:
            out[key] = None if value.strip().lower() in ('', 'none', 'null') else round(float(value), 1)
        else:
            out[key] = value
    return out


def parse_checks(pairs):
    return dict((key, value.strip().lower() in ('yes', 'true', '1')) for key, dummy, value in
                (pair.partition('=') for pair in pairs or []))


def case_row(requests, fault_at, until, fields, checks, served=True):
    """One case's row: the figures of the requests started within [fault_at, until] (serving again
    after: module_utils/fault_matrix.py; None when the case ended without serving), the fields the
    script gives, and its checks (name: held)."""
    row = {'node': 'gpu-host', 'manager': 'supervisor'}
    row.update(fields)
    row['checks'] = checks
    row['sent'], row['failed'] = fault_matrix.failed_during(requests, fault_at, until)
    row['serving_again_s'] = fault_matrix.serving_again_after(requests, fault_at, until) if served else None
    row['at'] = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(fault_at))
    return row


def merge(rows, row):
    """rows with row in place of one of the same id (a case run again), else appended."""
    return [r for r in rows if r.get('id') != row.get('id')] + [row]


def update(rows, case_id, fields, checks, note=''):
    """rows with the row of case_id given more fields and checks, note added to its notes."""
    out = []
    for row in rows:
        if row.get('id') == case_id:
            row = dict(row, **fields)
            row['checks'] = dict(row.get('checks') or {}, **checks)
            row['notes'] = ' '.join(part for part in (row.get('notes', '').strip(), note.strip()) if part)
        out.append(row)
    return out


def table_rows(rows):
    """fault_matrix.table's rows, each note ending with its checks."""
    out = []
    for row in rows:
        checks = row.get('checks') or {}
        failed = sorted(name for name, held in checks.items() if not held)
        said = ('checks failed: %s.' % ', '.join(failed)) if failed else ('checks held: %s.' % ', '.join(sorted(checks))
                                                                          if checks else '')
        out.append(dict(row, notes=' '.join(part for part in (row.get('notes', '').strip(), said) if part)))
    return out


def markdown(rows, meta):
    head = ('<!-- table written by scripts/gpu-e2e-faults.sh on %s, commit %s, %s -->\n'
            % (meta.get('date', '?'), meta.get('commit', '?'), meta.get('machine', '?')))
    text = head + fault_matrix.table(table_rows(rows)) + '\n'
    if meta.get('not_run'):
        text += '\nNot run in the last call (time): %s.\n' % meta['not_run']
    return text


def all_held(rows):
    return all(all((row.get('checks') or {}).values()) for row in rows)


def load_rows(path):
    if not os.path.exists(path):
        return []
    with open(path) as handle:
        rows = json.load(handle)
    return rows if isinstance(rows, list) else []


def save_rows(path, rows):
    with open(path + '.tmp', 'w') as handle:
        json.dump(rows, handle, indent=1)
    os.replace(path + '.tmp', path)


def main(argv=None):
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest='command')
    for name, positional in (('recap', ('log',)), ('failure', ('log', 'limit')), ('reserved', ('log', 'pattern')),
                             ('mentions', ('log', 'task', 'word')), ('history', ('file', 'pattern'))):
        command = sub.add_parser(name)
        for argument in positional:
            command.add_argument(argument)
    for name in ('row', 'update'):
        command = sub.add_parser(name)
        command.add_argument('--results', required=True)
        command.add_argument('--set', action='append', default=[])
        command.add_argument('--check', action='append', default=[])
        if name == 'row':
            command.add_argument('--load', required=True)
            command.add_argument('--fault-at', type=float, required=True)
            command.add_argument('--until', type=float, required=True)
            command.add_argument('--served', default='yes')
        else:
            command.add_argument('--id', required=True)
            command.add_argument('--note', default='')
    command = sub.add_parser('write')
    command.add_argument('--results', required=True)
    command.add_argument('--out', required=True)
    command.add_argument('--meta', action='append', default=[])
    args = parser.parse_args(argv)

    def text(path):
        with open(path, errors='replace') as handle:
            return handle.read()

    if args.command == 'recap':
        print(recap(text(args.log)) if os.path.exists(args.log) else 'no run')
    elif args.command == 'failure':
        print(failure(text(args.log), int(args.limit)) if os.path.exists(args.log) else '')
    elif args.command == 'reserved':
        lines = reservation_lines(text(args.log), args.pattern)
        print('\n'.join(lines))
        return 0 if lines else 1
    elif args.command == 'mentions':
        found = mentions(text(args.log), args.task, args.word)
        print(' | '.join(found))
        return 0 if found else 1
    elif args.command == 'history':
        gpus, seen_at = kept_history(text(args.file) if os.path.exists(args.file) else '', args.pattern)
        if not gpus:
            return 1
        print('%s (seen running %s)' % (', '.join('GPU %s: %d MiB' % (k, v) for k, v in sorted(gpus.items())), seen_at))
    elif args.command == 'row':
        rows = load_rows(args.results)
        new = case_row(read_requests(args.load), args.fault_at, args.until, parse_pairs(args.set),
                       parse_checks(args.check), served=args.served == 'yes')
        save_rows(args.results, merge(rows, new))
        print(json.dumps(new, sort_keys=True))
    elif args.command == 'update':
        rows = update(load_rows(args.results), args.id, parse_pairs(args.set), parse_checks(args.check), args.note)
        save_rows(args.results, rows)
    elif args.command == 'write':
        rows = load_rows(args.results)
        meta = dict(pair.partition('=')[::2] for pair in args.meta)
        with open(os.path.join(args.out, 'faults.json'), 'w') as handle:
            json.dump({'meta': meta, 'rows': rows, 'all_checks_held': all_held(rows)}, handle, indent=1)
        with open(os.path.join(args.out, 'faults.md'), 'w') as handle:
            handle.write(markdown(rows, meta))
        print(markdown(rows, meta))
        return 0 if all_held(rows) else 1
    else:
        parser.print_help()
        return 2
    return 0


if __name__ == '__main__':
    sys.exit(main())
