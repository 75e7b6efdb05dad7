"""kept_room: a kept service's GPU memory is reserved whether it runs at plan time or not (the
H100 case: a speech-recognition program restarting while the plan was made lost its 40 GiB)."""

import pytest

import json

from ansible_collections.gpulab.inference.plugins.module_utils import gguf_plan as gp
from ansible_collections.gpulab.inference.plugins.module_utils import layout_vllm as lv
from ansible_collections.gpulab.inference.plugins.module_utils.kept_room import (
    KeptRoomError,
    held_by_pattern,
    history_document,
    parse_history,
    process_names,
    reserve,
    reserve_on_nodes,
    reserved_lines,
    reserved_mib,
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
    ({'tts': True}, r"gpulab_kept_mib\['tts'\] is True"),
    ('{"tts": 1}', "gpulab_kept_mib is '{\"tts\": 1}'; give a dict of keep pattern"),
])
def test_a_bad_statement_is_refused_naming_the_variable(stated, message):
    with pytest.raises(KeptRoomError, match=message):
        reserve({}, stated, [], KEEP, [0])


def test_the_plan_s_kept_memory_counts_the_reservation():
    from ansible_collections.gpulab.inference.plugins.module_utils.layout_vllm import kept_mib
    gpu = {'index': 0, 'memory_total_mib': 81559, 'memory_free_mib': 81000}
    history = {'asr_00': {'gpus': {'0': 40960}, 'seen_at': 't'}}
    reserved = reserve(history, {}, [], KEEP, [0])['0']['reserved_mib']
    assert kept_mib(gpu, [], step_mib=0) == 559
    assert kept_mib(gpu, [], step_mib=0, reserved_mib=reserved) == 559 + 40960


# ---------------------------------------------------------------- the node's file

def test_the_history_file_round_trips_and_a_missing_one_is_empty():
    history = {'asr_00': {'gpus': {'0': 40960}, 'seen_at': 't'}}
    text = json.dumps(history_document(history))
    assert json.loads(text) == {'managed_by': 'gpulab.inference', 'services': history}
    assert parse_history(text, '/var/lib/gpulab/kept-room.json') == history
    assert parse_history(None, '/var/lib/gpulab/kept-room.json') == {}


@pytest.mark.parametrize('text, message', [
    ('{"managed_by": "gpulab.inference", "services": {', 'kept-room.json is not JSON'),
    ('{"services": {}}', 'kept-room.json is not a gpulab.inference record'),
    ('{"managed_by": "gpulab.inference", "services": {"asr": {"gpus": 5}}}', 'is not a gpulab.inference record'),
    ('{"managed_by": "gpulab.inference", "services": {"asr": {"gpus": {"0": "40 GiB"}}}}',
     "asr on GPU 0 is '40 GiB', not a whole number of MiB"),
])
def test_a_history_file_that_is_not_the_record_is_refused_with_its_path(text, message):
    with pytest.raises(KeptRoomError, match=message) as caught:
        parse_history(text, '/var/lib/gpulab/kept-room.json')
    assert '/var/lib/gpulab/kept-room.json' in str(caught.value)


# ---------------------------------------------------------------- the plans' view over the nodes

# The lab of the H100 case: the head runs the kept speech recognition, restarting (not running) at
# plan time; a worker keeps a TTS service that runs with its figure; a third node keeps a service
# never seen.
RESIDENCY = {
    'head': {'gpus': [{'index': 0, 'memory_total_mib': 81559, 'memory_free_mib': 21000}], 'processes': [OWN]},
    'worker': {'gpus': [{'index': 0, 'memory_total_mib': 81559}, {'index': 1, 'memory_total_mib': 81559}],
               'processes': [TTS]},
    'other': {'gpus': [{'index': 0, 'memory_total_mib': 81559}], 'processes': []},
}
KEPT = {
    'head': {'keep': ['asr_00'], 'history': {'asr_00': {'gpus': {'0': 40960}, 'seen_at': 't1'}}, 'stated': {}},
    'worker': {'keep': ['tts'], 'history': {'tts': {'gpus': {'1': 1000}, 'seen_at': 't2'}}, 'stated': {}},
    'other': {'keep': ['whisper'], 'history': {}, 'stated': None},
}


def test_each_node_reserves_for_its_own_kept_services():
    reserved = reserve_on_nodes(KEPT, RESIDENCY)
    assert reserved_mib(reserved, 'head', 0) == 40960
    assert reserved_mib(reserved, 'worker', 0) == 0
    assert reserved_mib(reserved, 'worker', 1) == 0
    assert reserved_mib(reserved, 'other', 0) == 0
    assert reserved_mib(reserved, 'nobody', 0) == 0
    assert reserved['other']['unknown'] == ['whisper']
    assert reserved_lines(reserved) == [
        'head: asr_00: 40960 MiB reserved on GPU 0 (40960 MiB from the most it held when last seen running (t1); '
        'not running now)',
        'other: nothing reserved for whisper: not running, never seen holding GPU memory here, and no figure in '
        'gpulab_kept_mib']
    assert reserve_on_nodes(None, RESIDENCY) == {}


def test_an_operator_s_bad_figure_is_refused_naming_the_node_and_the_variable():
    kept = dict(KEPT, worker=dict(KEPT['worker'], stated={'tts': -5}))
    with pytest.raises(KeptRoomError, match=r"^worker: gpulab_kept_mib\['tts'\] is -5"):
        reserve_on_nodes(kept, RESIDENCY)


def test_llama_cpp_s_devices_leave_the_reservation_free():
    residency = {'head': RESIDENCY['head'],
                 'worker': {'gpus': [{'index': 0, 'memory_total_mib': 81559, 'memory_free_mib': 81000}],
                            'processes': []}}
    kept = {'head': KEPT['head'], 'worker': {'keep': ['tts'], 'history': {}, 'stated': {'tts': 1500}}}
    reserved = reserve_on_nodes(kept, residency)
    devices = gp.devices_from_nodes('head', ['worker'], True, residency, own_units=['gpulab-llama-server.service'],
                                    reserved=reserved)
    # the worker: 81000 free less the stated 1500; the head: 21000 free plus its own 60000, less 40960
    assert [(d['name'], d['free_mib'], d['kept_reserved_mib']) for d in devices] == [
        ('RPC0', 81000 - 1500, 1500), ('CUDA0', 21000 + 60000 - 40960, 40960)]
    # without the reservation the head's GPU would look free but for 559 MiB (the H100 case: filled to 98%)
    assert gp.devices_from_nodes('head', [], True, residency, own_units=['gpulab-llama-server.service'])[0][
        'free_mib'] == 81000


def test_vllm_s_kept_memory_counts_the_reservation():
    residency = {'head': {'gpus': [{'index': 0, 'memory_total_mib': 81559, 'memory_free_mib': 80000}],
                          'processes': []}}
    nodes = [{'name': 'head', 'gpus': [{'index': 0, 'memory_total_mib': 81559}]}]
    reserved = reserve_on_nodes({'head': KEPT['head']}, residency)
    kept = lv.nodes_with_kept(nodes, residency, (), None, 0.9, reserved)[0]['gpus'][0]['kept_mib']
    assert kept == 81559 - (80000 - 40960) // 256 * 256
    # without it, the 1559 MiB no process holds fit in the tenth vLLM leaves alone: nothing kept
    assert lv.nodes_with_kept(nodes, residency, (), None, 0.9)[0]['gpus'][0]['kept_mib'] == 0
