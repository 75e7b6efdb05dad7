"""Offline stand-in for the get-pip.py bootstrap script that ansible-test downloads.

ansible-test creates its sanity venvs without pip and then runs a get-pip.py fetched from a
host outside PyPI, which labs and CI here cannot reach. This script does the same job with
what every CPython ships (ensurepip) and PyPI: install pip, then the requested packages.
It receives get-pip.py's arguments: pip install options followed by package specifiers.
"""

import subprocess
import sys

GET_PIP_ONLY_OPTIONS = {"--no-setuptools", "--no-wheel"}

subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade", "--default-pip"])
pip_args = [arg for arg in sys.argv[1:] if arg not in GET_PIP_ONLY_OPTIONS]
subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", *pip_args])
