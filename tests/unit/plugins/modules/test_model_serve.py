"""gpulab.inference.model_serve: serves the listed files for its duration, and stops only its own process."""

import os
import subprocess
import sys
import threading
import time
import urllib.request

from ansible_collections.gpulab.inference.plugins.modules import model_serve

from model_module_case import run


def test_serves_for_its_duration_and_writes_its_pid(tmp_path, capsys):
    (tmp_path / 'a.bin').write_bytes(b'payload')
    (tmp_path / 'secret').write_bytes(b'no')
    pid_file = tmp_path / 'serve.pid'
    answers = {}

    def client():
        while not pid_file.exists():
            time.sleep(0.02)
        answers['pid'] = int(pid_file.read_text())
        answers['a'] = urllib.request.urlopen('http://127.0.0.1:18391/a.bin', timeout=5).read()
        try:
            urllib.request.urlopen('http://127.0.0.1:18391/secret', timeout=5)
        except urllib.error.HTTPError as error:
            answers['secret'] = error.code

    thread = threading.Thread(target=client)
    thread.start()
    failed, result = run(model_serve.main, {'path': str(tmp_path), 'files': ['a.bin'], 'address': '127.0.0.1',
                                            'port': 18391, 'duration_s': 1, 'pid_file': str(pid_file)}, capsys)
    thread.join(5)
    assert not failed and result['served_s'] >= 1
    assert answers == {'pid': os.getpid(), 'a': b'payload', 'secret': 404}


def test_stop_ends_its_own_process_only(tmp_path, capsys):
    pid_file = tmp_path / 'serve.pid'
    failed, result = run(model_serve.main, {'state': 'stopped', 'pid_file': str(pid_file)}, capsys)
    assert not failed and not result['changed'] and result['stopped_pid'] is None
    # A process that is not this module's (a reused pid) is left alone and the file removed.
    other = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])
    pid_file.write_text('%d\n' % other.pid)
    failed, result = run(model_serve.main, {'state': 'stopped', 'pid_file': str(pid_file)}, capsys)
    assert not result['changed'] and other.poll() is None and not pid_file.exists()
    other.kill()
    other.wait()
    server = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)', 'model_serve'])
    time.sleep(0.2)
    pid_file.write_text('%d\n' % server.pid)
    failed, result = run(model_serve.main, {'state': 'stopped', 'pid_file': str(pid_file)}, capsys, check_mode=True)
    assert result['changed'] and server.poll() is None
    failed, result = run(model_serve.main, {'state': 'stopped', 'pid_file': str(pid_file)}, capsys)
    assert not failed and result['changed'] and result['stopped_pid'] == server.pid
    assert server.wait(5) is not None and not pid_file.exists()


def test_started_needs_a_place_and_check_mode_serves_nothing(tmp_path, capsys):
    failed, result = run(model_serve.main, {'pid_file': str(tmp_path / 'p')}, capsys)
    assert failed and result['msg'] == 'model_serve: state=started needs path and address'
    failed, result = run(model_serve.main, {'path': str(tmp_path), 'address': '127.0.0.1', 'pid_file': str(tmp_path / 'p')}, capsys, check_mode=True)
    assert not failed and result['served_s'] == 0.0 and not (tmp_path / 'p').exists()
