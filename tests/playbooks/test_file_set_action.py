"""Action file_set renders a template as ansible.builtin.template does and copies a source as
ansible.builtin.copy does, byte for byte, in one module run; a second run changes nothing, check
mode writes nothing, and a mode written unquoted in YAML is refused before the module runs."""

import yaml
from playbook_runner import local_host, run_in

TEMPLATE = """#!/bin/sh
# {{ title }}
{% for port in ports %}
exec server --port {{ port }}{% if not loop.last %} \\{% endif %}

{% endfor %}
{{ wrapper.name }}
"""


def play(tmp_path, tasks, check=False):
    book = tmp_path / 'file-set.yml'
    book.write_text(yaml.safe_dump([{'name': 'file_set against template and copy', 'hosts': 'all', 'gather_facts': False,
                                     'check_mode': check, 'vars': {'title': 'A wrapper', 'ports': [50052, 50053]},
                                     'tasks': tasks}], sort_keys=False))
    return run_in(tmp_path / 'runner', book, {'all': {'hosts': {'controller': local_host()}}})


def file_set_task(out):
    return {'name': 'Render with file_set', 'register': 'rendered', 'gpulab.inference.file_set': {'files': [
        {'path': str(out), 'state': 'directory', 'mode': '0755'},
        {'path': str(out / 'wrapper.sh'), 'template': 'wrapper.sh.j2', 'mode': '0755', 'vars': {'wrapper': {'name': 'gpulab-x'}}},
        {'path': str(out / 'guard.py'), 'src': 'guard.py', 'mode': '0644'},
    ]}}


def test_same_bytes_as_template_and_copy_then_nothing_to_do(tmp_path):
    (tmp_path / 'templates').mkdir()
    (tmp_path / 'templates' / 'wrapper.sh.j2').write_text(TEMPLATE)
    (tmp_path / 'files').mkdir()
    (tmp_path / 'files' / 'guard.py').write_text('print("guard")\n\n')
    builtin, ours = tmp_path / 'builtin', tmp_path / 'ours'
    builtin.mkdir()
    reference = [
        {'name': 'Render with template', 'vars': {'wrapper': {'name': 'gpulab-x'}},
         'ansible.builtin.template': {'src': 'wrapper.sh.j2', 'dest': str(builtin / 'wrapper.sh'), 'mode': '0755'}},
        {'name': 'Copy with copy', 'ansible.builtin.copy': {'src': 'guard.py', 'dest': str(builtin / 'guard.py'), 'mode': '0644'}},
    ]
    first = play(tmp_path, reference + [file_set_task(ours)])
    assert first.status == 'successful', first.failures
    for name in ('wrapper.sh', 'guard.py'):
        assert (ours / name).read_bytes() == (builtin / name).read_bytes()
    assert 'exec server --port 50052 \\\nexec server --port 50053\ngpulab-x\n' in (ours / 'wrapper.sh').read_text()
    assert (ours / 'wrapper.sh').stat().st_mode & 0o777 == 0o755
    assert first.ok_results('Render with file_set')[0]['changed_paths'] == [str(ours), str(ours / 'wrapper.sh'), str(ours / 'guard.py')]

    again = play(tmp_path, [file_set_task(ours)])
    assert again.status == 'successful', again.failures
    assert again.changed_tasks() == []


def test_check_mode_writes_nothing_and_an_unquoted_mode_is_refused(tmp_path):
    (tmp_path / 'templates').mkdir()
    (tmp_path / 'templates' / 'wrapper.sh.j2').write_text(TEMPLATE)
    (tmp_path / 'files').mkdir()
    (tmp_path / 'files' / 'guard.py').write_text('print("guard")\n')
    checked = play(tmp_path, [file_set_task(tmp_path / 'ours')], check=True)
    assert checked.status == 'successful', checked.failures
    assert checked.changed_tasks() == [('controller', 'Render with file_set')]
    assert not (tmp_path / 'ours').exists()

    unquoted = play(tmp_path, [{'name': 'Unquoted mode', 'gpulab.inference.file_set': {
        'files': [{'path': str(tmp_path / 'x'), 'content': 'x', 'mode': 420}]}}])
    assert unquoted.failures == [('controller', 'Unquoted mode', 'file_set: files[0] (%s): mode must be a string of octal digits, '
                                  'such as "0644" (quoted in YAML), not 420' % (tmp_path / 'x'))]
    assert not (tmp_path / 'x').exists()
