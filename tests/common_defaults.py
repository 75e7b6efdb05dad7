"""Role common's defaults as the roles see them, for tests that need a shared value (the own-unit
patterns, as gpulab_own_unit_patterns composes them) without restating it: the value is read from roles/common/defaults/main.yml and its
`{{ name }}` references are replaced by the defaults they name."""

import re
from pathlib import Path

import yaml

COMMON_DEFAULTS = Path(__file__).resolve().parents[1] / 'roles' / 'common' / 'defaults' / 'main.yml'
REFERENCE = re.compile(r'\{\{\s*(\w+)\s*\}\}')


def common_default(name):
    defaults = yaml.safe_load(COMMON_DEFAULTS.read_text())

    def render(value):
        if isinstance(value, list):
            return [render(item) for item in value]
        if isinstance(value, dict):
            return dict((key, render(item)) for key, item in value.items())
        if isinstance(value, str):
            return REFERENCE.sub(lambda match: render(defaults[match.group(1)]), value)
        return value

    return render(defaults[name])


OWN_UNITS = common_default('gpulab_own_units')['llama_cpp'] + common_default('gpulab_own_units')['vllm']
