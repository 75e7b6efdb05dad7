"""Role common's defaults as the roles see them, for tests that need a shared value (the own-unit
patterns, as gpulab_own_unit_patterns composes them) without restating it: every file of
roles/common/defaults/main/ (one per topic) is read and merged as Ansible loads them, and a value's
`{{ name }}` references are replaced by the defaults they name."""

import re
from pathlib import Path

import yaml

COMMON_DEFAULTS_DIR = Path(__file__).resolve().parents[1] / 'roles' / 'common' / 'defaults' / 'main'
REFERENCE = re.compile(r'\{\{\s*(\w+)\s*\}\}')


def common_defaults_files():
    """The files Ansible loads as role common's defaults, in its order (sorted paths)."""
    return sorted(path for path in COMMON_DEFAULTS_DIR.rglob('*') if path.is_file())


def common_defaults():
    """Every file's variables in one dict. A name in two files raises ValueError: Ansible would keep
    the later one without a word, and a shared name is defined once."""
    merged, where = {}, {}
    for path in common_defaults_files():
        for name, value in (yaml.safe_load(path.read_text()) or {}).items():
            if name in merged:
                raise ValueError('%s is defined in %s and in %s' % (name, where[name].name, path.name))
            merged[name], where[name] = value, path
    return merged


def common_default(name):
    defaults = common_defaults()

    def render(value):
        if isinstance(value, list):
            return [render(item) for item in value]
        if isinstance(value, dict):
            return dict((key, render(item)) for key, item in value.items())
        if isinstance(value, str):
            whole = REFERENCE.fullmatch(value)
            if whole:  # a value that is one reference keeps the type it names (a port stays a number)
                return render(defaults[whole.group(1)])
            return REFERENCE.sub(lambda match: str(render(defaults[match.group(1)])), value)
        return value

    return render(defaults[name])


ENGINES = common_default('gpulab_engines')
# Every engine's units in table order, as filter engine_units gives gpulab_own_unit_patterns.
OWN_UNITS = [unit for entry in ENGINES.values() for unit in entry['units']]


def engine_ports(engine, values):
    """An engine's ports from role common's table with their Jinja (port, enabled) rendered from
    values, as Ansible renders them from the variables it has."""
    import jinja2  # pylint: disable=import-outside-toplevel

    rendered = []
    for port in common_defaults()['gpulab_engines'][engine]['ports']:
        port = dict(port)
        for key in ('port', 'enabled'):
            if isinstance(port.get(key), str):
                port[key] = jinja2.Environment().from_string(port[key]).render(**values)
        rendered.append(port)
    return rendered
