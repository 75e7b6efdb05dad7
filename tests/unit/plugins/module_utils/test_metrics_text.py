"""The exposition format the node exporter's textfile collector reads, and the atomic write."""

import os

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils.metrics_text import (
    MetricsTextError,
    escape_label_value,
    family,
    format_value,
    render,
    write_atomic,
)


def test_render_writes_help_type_and_sorted_labels():
    text = render([
        family('gpulab_gpu_memory_used_bytes', 'GPU memory\n in use.', 'gauge',
               [({'uuid': 'GPU-1', 'gpu': '0'}, 1048576), ({'gpu': '1', 'uuid': 'GPU-2'}, 0.5)]),
        family('gpulab_drain_state_present', 'Drain.', 'gauge', [({}, 0)]),
    ])
    assert text == (
        '# HELP gpulab_gpu_memory_used_bytes GPU memory in use.\n'
        '# TYPE gpulab_gpu_memory_used_bytes gauge\n'
        'gpulab_gpu_memory_used_bytes{gpu="0",uuid="GPU-1"} 1048576\n'
        'gpulab_gpu_memory_used_bytes{gpu="1",uuid="GPU-2"} 0.5\n'
        '# HELP gpulab_drain_state_present Drain.\n'
        '# TYPE gpulab_drain_state_present gauge\n'
        'gpulab_drain_state_present 0\n')


def test_a_family_without_samples_keeps_its_help_and_type():
    assert render([family('gpulab_build_info', 'Build.', 'gauge', [])]) == (
        '# HELP gpulab_build_info Build.\n# TYPE gpulab_build_info gauge\n')
    assert render([]) == ''


def test_label_values_are_escaped():
    assert escape_label_value('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
    text = render([family('m', 'h', 'gauge', [({'process': '/opt/x "y"'}, 1)])])
    assert 'm{process="/opt/x \\"y\\""} 1' in text


@pytest.mark.parametrize('value, text', [(3, '3'), (0.25, '0.25'), (float('nan'), 'NaN'),
                                         (float('inf'), '+Inf'), (float('-inf'), '-Inf'), (1e21, '1e+21')])
def test_format_value(value, text):
    assert format_value(value) == text


@pytest.mark.parametrize('value', [True, None, '3', [1]])
def test_format_value_refuses_what_is_not_a_number(value):
    with pytest.raises(MetricsTextError, match='is not a number'):
        format_value(value)


@pytest.mark.parametrize('name, kind, samples, message', [
    ('gpu-memory', 'gauge', [], "'gpu-memory' is not a Prometheus metric name"),
    ('', 'gauge', [], 'is not a Prometheus metric name'),
    ('m', 'histogram', [], "type 'histogram' is not one of gauge, counter, untyped"),
    ('m', 'gauge', [({'bad-label': 'x'}, 1)], "label name 'bad-label'"),
    ('m', 'gauge', [({'__name__': 'x'}, 1)], "label name '__name__'"),
    ('m', 'gauge', [({'a': '1'}, 1), ({'a': '1'}, 2)], 'two samples with the same labels'),
])
def test_family_refuses_what_the_format_cannot_carry(name, kind, samples, message):
    with pytest.raises(MetricsTextError, match=message.replace('(', r'\(').replace(')', r'\)')):
        family(name, 'help', kind, samples)


def test_render_refuses_a_family_listed_twice():
    with pytest.raises(MetricsTextError, match='metric families listed twice: m'):
        render([family('m', 'h', 'gauge', []), family('m', 'h', 'gauge', [])])


def test_write_atomic_replaces_the_file_whole_and_leaves_no_temporary(tmp_path):
    target = tmp_path / 'gpulab-gpu.prom'
    target.write_text('old\n')
    write_atomic(str(target), 'new\n')
    assert target.read_text() == 'new\n'
    assert oct(os.stat(str(target)).st_mode & 0o777) == '0o644'
    assert sorted(path.name for path in tmp_path.iterdir()) == ['gpulab-gpu.prom']


def test_write_atomic_keeps_the_old_file_when_the_write_fails(tmp_path, monkeypatch):
    target = tmp_path / 'gpulab-gpu.prom'
    target.write_text('old\n')

    def broken(*_args):
        raise OSError('disk full')
    monkeypatch.setattr(os, 'rename', broken)
    with pytest.raises(OSError, match='disk full'):
        write_atomic(str(target), 'new\n')
    assert target.read_text() == 'old\n'
    assert sorted(path.name for path in tmp_path.iterdir()) == ['gpulab-gpu.prom']
