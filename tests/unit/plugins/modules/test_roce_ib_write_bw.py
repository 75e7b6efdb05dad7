"""gpulab.inference.roce_ib_write_bw with ib_write_bw answered from a table: the exact client
command, retries while the server starts, the bandwidth verdict, and bad input.

The answers replay perftest's client output (RDMA_Write BW Test, RoCE, --report_gbits; without
it perftest reports MB/sec), as perftest prints it on a ConnectX port."""

import pytest

from ansible_collections.gpulab.inference.plugins.modules import roce_ib_write_bw
import module_harness
from module_harness import ExitJson, FailJson

BW = '/usr/bin/ib_write_bw'
TIMEOUT = '/usr/bin/timeout'
SERVER = '10.231.77.10'


def client(device='mlx5_0', gid_index='3', tcp_port='18515', duration_s='5', server=SERVER):
    """The client command, bounded by coreutils timeout at duration_s + 30 s."""
    return (TIMEOUT, '--kill-after=5s', '%ds' % (int(duration_s) + 30),
            BW, '-d', device, '-i', '1', '-x', gid_index, '-F', '--report_gbits', '-D', duration_s, '-p', tcp_port,
            server)


PREAMBLE = (
    '---------------------------------------------------------------------------------------\n'
    '                    RDMA_Write BW Test\n'
    ' Dual-port       : OFF\t\tDevice         : mlx5_0\n'
    ' Number of qps   : 1\t\tTransport type : IB\n'
    ' Connection type : RC\t\tUsing SRQ      : OFF\n'
    ' PCIe relax order: ON\n'
    ' ibv_wr* API     : ON\n'
    ' TX depth        : 128\n'
    ' CQ Moderation   : 100\n'
    ' Mtu             : 4096[B]\n'
    ' Link type       : Ethernet\n'
    ' GID index       : 3\n'
    ' Max inline data : 0[B]\n'
    ' rdma_cm QPs     : OFF\n'
    ' Data ex. method : Ethernet\n'
    '---------------------------------------------------------------------------------------\n'
    ' local address: LID 0000 QPN 0x01ac PSN 0xc76db1 RKey 0x23beb2 VAddr 0x007f26a2c8b000\n'
    ' GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:231:77:11\n'
    ' remote address: LID 0000 QPN 0x01a9 PSN 0x2f722 RKey 0x23beaf VAddr 0x007f820b24f000\n'
    ' GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:231:77:10\n'
    '---------------------------------------------------------------------------------------\n')
GBITS_REPORT = (
    PREAMBLE
    + ' #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n'
    + ' 65536      1754628          0.00               183.96             0.350880\n'
    + '---------------------------------------------------------------------------------------\n')
MBYTES_REPORT = (
    PREAMBLE
    + ' #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n'
    + ' 65536      1754628          0.00               21930.00            0.350880\n'
    + '---------------------------------------------------------------------------------------\n')
CPU_WARNING = ' Conflicting CPU frequency values detected: 1500.000000 != 3400.000000. CPU Frequency is not max.\n'
NO_SERVER = "Couldn't connect to 10.231.77.10:18515\nUnable to open file descriptor for socket connection Unable to init the socket connection\n"


class Replies(dict):
    """Answers one command with a different reply per call, in order (a server that starts late)."""

    def __init__(self, command, replies):
        super().__init__()
        self.command = command
        self.replies = list(replies)

    def __getitem__(self, command):
        assert command == self.command
        return self.replies.pop(0)


@pytest.fixture
def sleeps(monkeypatch):
    slept = []
    monkeypatch.setattr(roce_ib_write_bw.time, 'sleep', slept.append)
    return slept


def run(answers, **args):
    params = {'server': SERVER, 'device': 'mlx5_0', 'gid_index': 3, 'rate_gbps': 200.0}
    params.update(args)
    return module_harness.run_module(roce_ib_write_bw.main, params, answers, {'ib_write_bw': BW, 'timeout': TIMEOUT})


def test_measures_with_the_exact_client_command(sleeps):
    run_ = run({client(): (0, GBITS_REPORT, '')})
    assert run_.kind is ExitJson
    assert [c.args[0] for c in run_.get_bin_path.call_args_list] == ['ib_write_bw', 'timeout']
    assert run_.commands == [list(client())]
    assert run_.result == {
        'changed': False, 'gbps': 183.96, 'ok': True,
        'message': '184.0 Gbit/s measured, 160.0 Gbit/s wanted (80% of the 200 Gbit/s port rate)'}
    assert sleeps == []


def test_port_duration_and_gid_go_into_the_command(sleeps):
    command = client(device='mlx5_1', gid_index='5', tcp_port='18600', duration_s='10')
    run_ = run({command: (0, GBITS_REPORT, '')}, device='mlx5_1', gid_index=5, tcp_port=18600, duration_s=10)
    assert run_.kind is ExitJson
    assert run_.commands == [list(command)]


def test_warnings_between_rows_do_not_hide_the_bandwidth(sleeps):
    report = GBITS_REPORT.replace(' 65536 ', CPU_WARNING + ' 65536 ')
    run_ = run({client(): (0, report, '')})
    assert run_.kind is ExitJson
    assert run_.result['gbps'] == 183.96


def test_a_report_in_mbytes_is_converted_to_gbits(sleeps):
    run_ = run({client(): (0, MBYTES_REPORT, '')})
    assert run_.kind is ExitJson
    # perftest's MB is 2**20 bytes: 21930 MiB/s x 8 bits
    assert run_.result['gbps'] == pytest.approx(21930.0 * 8 * 1048576 / 1e9)
    assert run_.result['ok'] is True


def test_too_low_is_reported_not_failed(sleeps):
    run_ = run({client(): (0, GBITS_REPORT, '')}, rate_gbps=400.0, min_fraction=0.5)
    assert run_.kind is ExitJson
    assert (run_.result['ok'], run_.result['message']) == (
        False, '184.0 Gbit/s measured, 200.0 Gbit/s wanted (50% of the 400 Gbit/s port rate)')


def test_a_port_without_rate_is_not_ok(sleeps):
    run_ = run({client(): (0, GBITS_REPORT, '')}, rate_gbps=0.0)
    assert run_.kind is ExitJson
    assert (run_.result['ok'], run_.result['message']) == (False, 'the port reports no rate')


def test_retries_while_the_server_starts(sleeps):
    answers = Replies(client(), [(1, '', NO_SERVER), (1, '', NO_SERVER), (0, GBITS_REPORT, '')])
    run_ = run(answers, connect_attempts=3)
    assert run_.kind is ExitJson
    assert run_.commands == [list(client())] * 3
    assert sleeps == [1, 1]
    assert run_.result['gbps'] == 183.96


def test_gives_up_after_the_last_attempt_without_sleeping_again(sleeps):
    answers = Replies(client(), [(1, '', NO_SERVER), (1, '', NO_SERVER)])
    run_ = run(answers, connect_attempts=2)
    assert run_.kind is FailJson
    assert run_.commands == [list(client())] * 2
    assert sleeps == [1]
    assert run_.result['msg'] == ("%s failed (rc=1): Couldn't connect to 10.231.77.10:18515\nUnable to open file "
                                  "descriptor for socket connection Unable to init the socket connection"
                                  % ' '.join(client()[3:]))
    assert run_.result['rc'] == 1 and run_.result['cmd'] == list(client())


def test_other_failures_are_not_retried(sleeps):
    answers = Replies(client(), [(1, PREAMBLE, ' Failed to modify QP 425 to RTR\n Unable to Connect the HCA\'s through the link\n')])
    run_ = run(answers, connect_attempts=5)
    assert run_.kind is FailJson
    assert run_.commands == [list(client())]
    assert sleeps == []
    assert run_.result['msg'].endswith("Failed to modify QP 425 to RTR\n Unable to Connect the HCA's through the link")


def test_zero_attempts_still_measures_once(sleeps):
    run_ = run(Replies(client(), [(1, '', NO_SERVER)]), connect_attempts=0)
    assert run_.kind is FailJson
    assert run_.commands == [list(client())]
    assert sleeps == []


def test_output_without_a_bandwidth_row_fails_clearly(sleeps):
    run_ = run({client(): (0, PREAMBLE, '')})
    assert run_.kind is FailJson
    assert run_.result['msg'] == ('no bandwidth row in the ib_write_bw output (#bytes #iterations BW peak BW '
                                  'average ...)')
    assert run_.result['stdout'] == PREAMBLE


def test_a_garbled_row_is_named(sleeps):
    report = GBITS_REPORT.replace('183.96', 'n/a')
    run_ = run({client(): (0, report, '')})
    assert run_.kind is FailJson
    assert run_.result['msg'] == ("ib_write_bw row '65536      1754628          0.00               n/a             "
                                  "0.350880' has no number in the BW average column")


def test_a_server_name_is_refused_before_anything_runs(sleeps):
    run_ = run({}, server='node-a')
    assert run_.kind is FailJson
    assert run_.result['msg'] == "server 'node-a' is not an IPv4 address"
    assert run_.commands == []


def test_missing_options_are_named(sleeps):
    run_ = module_harness.run_module(roce_ib_write_bw.main, {'server': SERVER, 'device': 'mlx5_0'}, {}, BW)
    assert run_.kind is FailJson
    assert run_.result['msg'] == 'missing required arguments: gid_index, rate_gbps'
    assert run_.commands == []


def test_a_gid_index_that_is_no_number_is_named(sleeps):
    run_ = run({}, gid_index='three')
    assert run_.kind is FailJson
    assert run_.result['msg'].startswith("argument 'gid_index' is of type str and we were unable to convert to int")
    assert run_.commands == []


def test_check_mode_measures_nothing(sleeps):
    run_ = run({}, _ansible_check_mode=True)
    assert run_.kind is ExitJson
    assert run_.result['skipped'] is True
    assert run_.commands == []


@pytest.mark.parametrize('args, message', [
    ({'device': 'mlx5_0; reboot'}, "device 'mlx5_0; reboot' is not an RDMA device name"),
    ({'device': 'mlx5_0\n'}, 'is not an RDMA device name'),
    ({'gid_index': -1}, 'gid_index -1 is negative'),
    ({'tcp_port': 0}, 'tcp_port 0 is out of range'),
    ({'tcp_port': 70000}, 'tcp_port 70000 is out of range'),
    ({'duration_s': 0}, 'duration_s 0 must be 1 or more'),
    ({'rate_gbps': -200.0}, 'rate_gbps -200.0 is negative'),
    ({'min_fraction': 0.0}, 'min_fraction 0.0 is not a fraction in (0, 1]'),
    ({'min_fraction': 1.5}, 'min_fraction 1.5 is not a fraction'),
])
def test_options_that_cannot_work_are_refused_before_anything_runs(sleeps, args, message):
    run_ = run({}, **args)
    assert run_.kind is FailJson, run_.result
    assert message in run_.result['msg']
    assert run_.commands == []


@pytest.mark.parametrize('rc', [124, 137])
def test_a_run_that_does_not_finish_is_stopped_and_named(sleeps, rc):
    run_ = run({client(): (rc, '', '')})
    assert run_.kind is FailJson, run_.result
    assert 'did not finish within 35 s (duration_s + 30 s): the server at 10.231.77.10 does not answer' in run_.result['msg']
    assert run_.commands == [list(client())]
