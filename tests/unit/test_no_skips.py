"""tests/no_skips.py: a skip anywhere (in a test, a fixture, a module, an empty parameter set)
fails the run; passing and strict xfail tests are unaffected."""

import subprocess
import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parents[1]

CASES = {
    'skip in a test': 'import pytest\n\ndef test_a():\n    pytest.skip("no binary")\n',
    'skipif marker': 'import pytest\n\n@pytest.mark.skipif(True, reason="no binary")\ndef test_a():\n    pass\n',
    'skip for the module': 'import pytest\npytest.skip("no binary", allow_module_level=True)\n\ndef test_a():\n    pass\n',
    'skip in a fixture': ('import pytest\n\n@pytest.fixture\ndef tool():\n    pytest.skip("no binary")\n\n'
                          'def test_a(tool):\n    pass\n'),
    'empty parameter set': 'import pytest\n\n@pytest.mark.parametrize("x", [])\ndef test_a(x):\n    pass\n',
}


def run_pytest(tmp_path, source):
    (tmp_path / 'test_case.py').write_text(source)
    (tmp_path / 'pytest.ini').write_text('[pytest]\n')
    return subprocess.run(
        [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-p', 'no_skips', str(tmp_path)],
        cwd=str(tmp_path), env={'PYTHONPATH': str(TESTS_DIR), 'PATH': '/usr/bin:/bin'},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False)


@pytest.mark.parametrize('source', list(CASES.values()), ids=list(CASES))
def test_a_skip_fails_the_run(tmp_path, source):
    result = run_pytest(tmp_path, source)
    assert result.returncode in (1, 2), result.stdout  # 2: a module that fails to collect stops the run
    assert 'a skipped test counts as a failure here' in result.stdout
    assert ' skipped' not in result.stdout.splitlines()[-1]


def test_passing_tests_pass(tmp_path):
    result = run_pytest(tmp_path, 'def test_a():\n    assert True\n')
    assert result.returncode == 0, result.stdout
    assert '1 passed' in result.stdout
