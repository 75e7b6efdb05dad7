"""gpulab.inference.roce_rpc_transport on llama.cpp RPC logs: the H200 rpc-server capture (an RDMA
build whose clients came over loopback TCP), and server and client logs built from the lines
llama.cpp prints (ggml/src/ggml-rpc/transport.cpp: "RDMA probed: dev=%s gid=%d%s qpn=%u inline=%u",
"RDMA activated: qpn=%u->%u mtu=%d rx_depth=%d", "RDMA activate failed, staying on TCP";
tools/rpc/rpc-server.cpp: the "transport : TCP" banner and "Accepted client connection")."""

from pathlib import Path

from ansible_collections.gpulab.inference.plugins.modules import roce_rpc_transport
import module_harness
from module_harness import ExitJson, FailJson

H200_LOG = Path(__file__).resolve().parents[2] / 'fixtures' / 'roce' / 'llama-rpc' / 'rpc-server-h200-tcp.log'

RDMA_BANNER = '  transport      : TCP (RDMA auto-negotiate enabled)\n'
TCP_BANNER = '  transport      : TCP\n'
TCP_CONNECTION = {'transport': 'TCP', 'device': None, 'gid_index': None, 'roce': None, 'mtu': None}


def run(args):
    return module_harness.run_module(roce_rpc_transport.main, args, {}, None)


def test_h200_capture_counts_every_connection_as_tcp():
    run_ = run({'log': H200_LOG.read_text(), 'host': 'node-b'})
    assert run_.kind is ExitJson
    assert run_.commands == []
    assert run_.result['changed'] is False
    assert run_.result['rdma_capable'] is True
    # 15 "Accepted client connection" lines, none upgraded
    assert run_.result['connections'] == [TCP_CONNECTION] * 15
    assert (run_.result['rdma'], run_.result['tcp']) == (0, 15)
    # RDMA not expected: nothing to warn about
    assert run_.result['warning'] == ''
    assert run_.warnings == []


def test_h200_capture_warns_with_the_counts_when_rdma_was_expected():
    run_ = run({'log': H200_LOG.read_text(), 'host': 'node-b', 'rdma_expected': True})
    assert run_.kind is ExitJson
    expected = ('node-b: 15 of 15 RPC connections stayed on TCP; check GGML_RDMA_DEV/GGML_RDMA_GID and that '
                'the fabric address has a RoCE v2 GID (playbooks/fabric-check.yml)')
    assert run_.result['warning'] == expected
    assert run_.warnings == [expected]


def test_server_log_with_one_rdma_and_one_failed_upgrade():
    log = (RDMA_BANNER
           + 'Accepted client connection\n'
           + 'RDMA probed: dev=mlx5_0 gid=3 RoCEv2 qpn=692 inline=220\n'
           + 'RDMA activated: qpn=692->144 mtu=4096 rx_depth=24\n'
           + 'Client connection closed\n'
           + 'Accepted client connection\n'
           + 'RDMA probed: dev=mlx5_0 gid=2 RoCEv1 qpn=693 inline=220\n'
           + 'RDMA activate failed, staying on TCP\n')
    run_ = run({'log': log, 'rdma_expected': True})
    assert run_.kind is ExitJson
    assert run_.result['connections'] == [
        {'transport': 'RDMA', 'device': 'mlx5_0', 'gid_index': 3, 'roce': 'RoCE v2', 'mtu': 4096},
        {'transport': 'TCP', 'device': 'mlx5_0', 'gid_index': 2, 'roce': 'RoCE v1', 'mtu': None},
    ]
    assert (run_.result['rdma'], run_.result['tcp']) == (1, 1)
    # without a host the warning names "RPC"
    assert run_.warnings == ['RPC: 1 of 2 RPC connections stayed on TCP; check GGML_RDMA_DEV/GGML_RDMA_GID and '
                             'that the fabric address has a RoCE v2 GID (playbooks/fabric-check.yml)']


def test_all_connections_over_rdma_are_quiet():
    log = RDMA_BANNER + ''.join(
        'Accepted client connection\nRDMA probed: dev=mlx5_0 gid=3 RoCEv2 qpn=%d inline=220\n'
        'RDMA activated: qpn=%d->%d mtu=4096 rx_depth=24\n' % (qpn, qpn, qpn + 100) for qpn in (10, 11, 12))
    run_ = run({'log': log, 'host': 'node-c', 'rdma_expected': True})
    assert run_.kind is ExitJson
    assert (run_.result['rdma'], run_.result['tcp']) == (3, 0)
    assert all(c == {'transport': 'RDMA', 'device': 'mlx5_0', 'gid_index': 3, 'roce': 'RoCE v2', 'mtu': 4096}
               for c in run_.result['connections'])
    assert (run_.result['warning'], run_.warnings) == ('', [])


def test_a_tcp_only_build_is_named_as_such():
    log = TCP_BANNER + 'Accepted client connection\nClient connection closed\n'
    run_ = run({'log': log, 'host': 'node-b', 'rdma_expected': True})
    assert run_.kind is ExitJson
    assert run_.result['rdma_capable'] is False
    assert (run_.result['rdma'], run_.result['tcp']) == (0, 1)
    assert run_.warnings == ['node-b: the RPC server was built without RDMA (banner "transport : TCP"); rebuild '
                             'llama.cpp with libibverbs-dev installed (GGML_RPC_RDMA)']


def test_client_log_without_banner_splits_connections_at_each_probe():
    # llama-server (the client) prints no banner and no "Accepted": one probe per connection
    log = ('RDMA probed: dev=mlx5_0 gid=3 RoCEv2 qpn=300 inline=220\n'
           'RDMA activated: qpn=300->692 mtu=4096 rx_depth=24\n'
           'RDMA probed: dev=mlx5_0 gid=3 RoCEv2 qpn=301 inline=220\n'
           'RDMA activated: qpn=301->710 mtu=1024 rx_depth=24\n')
    run_ = run({'log': log, 'host': 'node-a', 'rdma_expected': True})
    assert run_.kind is ExitJson
    assert run_.result['rdma_capable'] is None
    assert [(c['transport'], c['mtu']) for c in run_.result['connections']] == [('RDMA', 4096), ('RDMA', 1024)]
    assert run_.warnings == []


def test_an_empty_log_has_no_connections():
    run_ = run({'log': '', 'rdma_expected': True})
    assert run_.kind is ExitJson
    assert (run_.result['rdma_capable'], run_.result['connections'], run_.result['rdma'], run_.result['tcp']) == (
        None, [], 0, 0)
    assert run_.result['warning'] == ''


def test_check_mode_gives_the_same_answer():
    log = TCP_BANNER + 'Accepted client connection\n'
    normal = run({'log': log, 'host': 'node-b', 'rdma_expected': True})
    checked = run({'log': log, 'host': 'node-b', 'rdma_expected': True, '_ansible_check_mode': True})
    assert checked.kind is ExitJson
    assert checked.result == normal.result


def test_missing_log_is_named():
    run_ = run({'host': 'node-b'})
    assert run_.kind is FailJson
    assert run_.result['msg'] == 'missing required arguments: log'


def test_rdma_expected_must_be_a_boolean():
    run_ = run({'log': '', 'rdma_expected': 'perhaps'})
    assert run_.kind is FailJson
    assert run_.result['msg'].startswith("argument 'rdma_expected' is of type str and we were unable to convert "
                                         "to bool: The value 'perhaps' is not a valid boolean.")
