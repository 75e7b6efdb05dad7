"""Module slurp_files: one run reads every file, changes nothing, and fails naming a required file it
could not read."""

import base64

from ansible_collections.gpulab.inference.plugins.modules import slurp_files
from module_harness import ExitJson, FailJson, run_module


def run(args):
    return run_module(slurp_files.main, args, {}, None)


def test_reads_every_file_and_reports_the_absent_one(tmp_path):
    (tmp_path / 'plan.json').write_text('{"layout": "auto"}')
    outcome = run({'files': {'plan': str(tmp_path / 'plan.json'), 'fabric': str(tmp_path / 'fabric.json')}})
    assert outcome.kind is ExitJson, outcome.result
    assert outcome.result['changed'] is False
    assert base64.b64decode(outcome.result['files']['plan']['content']) == b'{"layout": "auto"}'
    assert outcome.result['files']['fabric']['missing'] is True
    assert outcome.commands == []


def test_a_required_file_absent_fails_naming_it(tmp_path):
    outcome = run({'files': {'build_info': str(tmp_path / 'BUILD_INFO.json')}, 'required': ['build_info'],
                   '_ansible_check_mode': True})
    assert outcome.kind is FailJson
    assert outcome.result['msg'] == 'slurp_files: build_info: file not found: %s' % (tmp_path / 'BUILD_INFO.json')
