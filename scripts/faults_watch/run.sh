#!/usr/bin/env bash
# The guard's hung-server watch on a lab worker under systemd, with the RPC table's rules for root's
# HELLO: a stand-in ggml RPC server (fake_rpc.py: answers HELLO like rpc_serve_client, then one reply
# per command) as a unit of nobody with Restart=always, the guard (module_utils/rpc_guard.py with
# --watch-code) as a transient unit, a "head" on node-a sending a command a second. Three SIGSTOPs
# (measure_stop.py), then a server that stops reading (fake_rpc.py with 3, measure_stall.py). Port 50099
# and table gpulab_rpc_t, removed at the end; the lab's own services are not touched.
#   bash scripts/faults_watch/run.sh gpulab-flt 10.231.83
set -euo pipefail
lab=${1:-gpulab-flt}; prefix=${2:-10.231.83}
here=$(cd "$(dirname "$0")" && pwd); repo=$(cd "$here/../.." && pwd)
worker=$lab-node-b; head=$lab-node-a; addr=$prefix.11; head_addr=$prefix.10
podman exec "$worker" mkdir -p /opt/gpulab-test
for f in "$repo/plugins/module_utils/rpc_guard.py" "$repo/plugins/module_utils/rpc_watch.py" "$here"/fake_rpc.py "$here"/measure_stop.py "$here"/measure_stall.py; do
  podman cp "$f" "$worker:/opt/gpulab-test/$(basename "$f")"
done
podman cp "$here/head_client.py" "$head:/tmp/head_client.py"
podman exec "$worker" bash -c "
cat > /etc/systemd/system/gpulab-fake-rpc@.service <<EOT
[Service]
ExecStart=/usr/bin/python3 /opt/gpulab-test/fake_rpc.py $addr 50099
User=nobody
Restart=always
RestartSec=5
EOT
nft -f - <<EOT
table inet gpulab_rpc_t
delete table inet gpulab_rpc_t
table inet gpulab_rpc_t {
	chain input {
		type filter hook input priority filter - 10; policy accept;
		tcp dport { 22 } accept
		iif \"lo\" meta mark 0x67706c62 tcp dport { 50099 } accept
		tcp dport { 50099 } ip saddr { $head_addr } accept
		tcp dport { 50099 } counter drop
	}
	chain output {
		type filter hook output priority filter - 10; policy accept;
		oif \"lo\" meta skuid 0 tcp dport { 50099 } meta mark set 0x67706c62
	}
}
EOT
systemctl daemon-reload && systemctl start gpulab-fake-rpc@0.service && sleep 1
systemd-run --unit=gpulab-guard-test -p Restart=always /usr/bin/python3 /opt/gpulab-test/rpc_guard.py --table gpulab_rpc_t \
  --ports 50099 --manager systemd --units gpulab-fake-rpc@0.service --watch-code /opt/gpulab-test/rpc_watch.py \
  --watch-endpoints $addr:50099 --watch-state-file /run/gpulab/rpc-watch-test.json
sleep 4; python3 -c 'import json; s = json.load(open(\"/run/gpulab/rpc-watch-test.json\"))[\"servers\"][0]; print(\"no client:\", s[\"verdict\"], s[\"why\"])'"
for i in 1 2 3; do
  podman exec -d "$head" bash -c "python3 /tmp/head_client.py $addr 50099 > /tmp/head_client.log 2>&1"; sleep 4
  echo "SIGSTOP $i: $(podman exec "$worker" python3 /opt/gpulab-test/measure_stop.py gpulab-fake-rpc@0.service /run/gpulab/rpc-watch-test.json)"
  sleep 2
done
podman exec "$worker" bash -c 'mkdir -p /etc/systemd/system/gpulab-fake-rpc@0.service.d && printf "[Service]\nExecStart=\nExecStart=/usr/bin/python3 /opt/gpulab-test/fake_rpc.py %s 50099 3\n" '"$addr"' > /etc/systemd/system/gpulab-fake-rpc@0.service.d/stall.conf && systemctl daemon-reload && systemctl restart gpulab-fake-rpc@0.service'
sleep 3; podman exec -d "$head" bash -c "python3 /tmp/head_client.py $addr 50099 > /tmp/head_client.log 2>&1"
echo "stops reading: $(podman exec "$worker" python3 /opt/gpulab-test/measure_stall.py gpulab-fake-rpc@0.service /run/gpulab/rpc-watch-test.json)"
podman exec "$worker" bash -c 'systemctl stop gpulab-guard-test gpulab-fake-rpc@0.service; systemctl reset-failed gpulab-guard-test 2>/dev/null || true
  rm -rf /etc/systemd/system/gpulab-fake-rpc@.service /etc/systemd/system/gpulab-fake-rpc@0.service.d /opt/gpulab-test /run/gpulab/rpc-watch-test.json
  systemctl daemon-reload; nft delete table inet gpulab_rpc_t'
podman exec "$head" pkill -f head_client.py || true
