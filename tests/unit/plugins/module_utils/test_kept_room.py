"""kept_room: a kept service's GPU memory is reserved whether it runs at plan time or not (the
H100 case: a speech-recognition program restarting while the plan was made lost its 40 GiB)."""

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils.kept_room import (
    KeptRoomError,
    held_by_pattern,
    process_names,
    reserve,
    update_history,
)

ASR = {'gpu_index': 0, 'used_memory_mib': 40960, 'supervisor_program': 'asr:asr_00', 'pid': 10}
ASR_LOADING = dict(ASR, used_memory_mib=2048)
OWN = {'gpu_index': 0, 'used_memory_mib': 60000, 'systemd_unit': 'gpulab-llama-server.service', 'pid': 11}
TTS = {'gpu_index': 1, 'used_memory_mib': 1000, 'systemd_unit': 'tts.service', 'pid': 12}
KEEP = ['asr_00', 'tts']


def test_names_a_keep_pattern_matches():
    assert process_names(ASR) == ['asr:asr_00', 'asr_00']
    assert process_names(TTS) == ['tts.service', 'tts']
    assert process_names({'container': 'whisper'}) == ['whisper']


def test_held_by_pattern_sums_per_gpu():
    assert held_by_pattern([ASR, dict(ASR, pid=13, used_memory_mib=100), OWN, TTS], KEEP) == {
        'asr_00': {'0': 41060}, 'tts': {'1': 1000}}


def test_history_keeps_the_most_held_and_survives_a_look_without_the_service():
    history = update_history({}, [ASR, OWN], KEEP, 't1')
    assert history == {'asr_00': {'gpus': {'0': 40960}, 'seen_at': 't1'}}
    # restarting: seen with less, and then not at all; the figure stays
    history = update_history(history, [ASR_LOADING], KEEP, 't2')
    assert history == {'asr_00': {'gpus': {'0': 40960}, 'seen_at': 't2'}}
    history = update_history(history, [], KEEP, 't3')
    assert history == {'asr_00': {'gpus': {'0': 40960}, 'seen_at': 't2'}}
    # no longer kept: forgotten
    assert update_history(history, [], ['tts'], 't4') == {}


def test_a_kept_service_that_is_down_at_plan_time_keeps_its_room():
    history = {'asr_00': {'gpus': {'0': 40960}, 'seen_at': '2026-12-06T10:00:00Z'}}
    plan = reserve(history, {}, [OWN], KEEP, [0, 1])
    assert plan['0']['reserved_mib'] == 40960
    assert plan['0']['why'] == ['asr_00: 40960 MiB reserved on GPU 0 (40960 MiB from the most it held when last seen '
                                'running (2026-12-06T10:00:00Z); not running now)']
    assert plan['1'] == {'reserved_mib': 0, 'why': []}


def test_a_kept_service_still_loading_gets_the_rest_and_a_running_one_nothing():
    history = {'asr_00': {'gpus': {'0': 40960}, 'seen_at': 't'}}
    assert reserve(history, {}, [ASR_LOADING], KEEP, [0])['0']['reserved_mib'] == 40960 - 2048
    assert reserve(history, {}, [ASR], KEEP, [0])['0']['reserved_mib'] == 0


def test_the_operator_s_figure_wins_and_covers_a_service_never_seen():
    history = {'asr_00': {'gpus': {'0': 40960}, 'seen_at': 't'}}
    assert reserve(history, {'asr_00': 45000}, [], KEEP, [0, 1])['0']['reserved_mib'] == 45000
    # never seen: on every GPU of the node
    never = reserve({}, {'tts': 1500}, [], KEEP, [0, 1])
    assert (never['0']['reserved_mib'], never['1']['reserved_mib']) == (1500, 1500)
    assert never['1']['why'] == ['tts: 1500 MiB reserved on GPU 1 (1500 MiB from gpulab_kept_mib; not running now)']


@pytest.mark.parametrize('stated, message', [
    ({'asr': 1}, "gpulab_kept_mib names 'asr', which is not a keep pattern"),
    ({'tts': -1}, r"gpulab_kept_mib\['tts'\] is -1"),
    ({'tts': '1 GiB'}, r"gpulab_kept_mib\['tts'\] is '1 GiB'"),
])
def test_a_bad_statement_is_refused_naming_the_variable(stated, message):
    with pytest.raises(KeptRoomError, match=message):
        reserve({}, stated, [], KEEP, [0])


def test_the_plan_s_kept_memory_counts_the_reservation():
    from ansible_collections.gpulab.inference.plugins.module_utils.layout_auto import kept_mib
    gpu = {'index': 0, 'memory_total_mib': 81559, 'memory_free_mib': 81000}
    history = {'asr_00': {'gpus': {'0': 40960}, 'seen_at': 't'}}
    reserved = reserve(history, {}, [], KEEP, [0])['0']['reserved_mib']
    assert kept_mib(gpu, [], step_mib=0) == 559
    assert kept_mib(gpu, [], step_mib=0, reserved_mib=reserved) == 559 + 40960
