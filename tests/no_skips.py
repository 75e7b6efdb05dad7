"""A skipped test counts as a failed one: every test under tests/ must run and be able to fail.

tests/conftest.py loads these hooks for every test directory. A test that cannot run where it
is (a missing binary, a missing environment variable) then stops `make unit` with its reason,
instead of passing silently. Expected failures (xfail) are left alone; pytest.ini makes them strict.
"""

import pytest

MESSAGE = 'skipped, and a skipped test counts as a failure here (tests/no_skips.py): %s'


def _reason(longrepr):
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return longrepr[2]
    return str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):  # pylint: disable=unused-argument
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, 'wasxfail'):
        report.outcome = 'failed'
        report.longrepr = MESSAGE % _reason(report.longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):  # pylint: disable=unused-argument
    outcome = yield
    report = outcome.get_result()
    if report.skipped:
        report.outcome = 'failed'
        report.longrepr = MESSAGE % _reason(report.longrepr)
