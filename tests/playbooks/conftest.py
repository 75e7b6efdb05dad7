"""Fixtures for the playbook tests (see playbook_runner.py)."""

from playbook_runner import run_playbook  # noqa: F401 pylint: disable=unused-import
