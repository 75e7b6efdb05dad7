"""Runs a model_* module's main() through AnsibleModule's real I/O (capsys), and a loopback mirror."""

import hashlib
import json
import threading

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpulab.inference.plugins.module_utils import model_io


def run(main, args, capsys, check_mode=False):
    """(failed, result) of main() with args."""
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exit_info:
            main()
    return exit_info.value.code != 0, json.loads(capsys.readouterr().out)


def sha(data):
    return hashlib.sha256(data).hexdigest()


def serve(root, names):
    """The module's own server on 127.0.0.1 over root; returns (server, base URL)."""
    server = model_io.ModelServer('127.0.0.1', 0, str(root), names)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server, 'http://127.0.0.1:%d' % server.server_address[1]
