"""A stand-in ggml RPC server: answers HELLO as rpc_serve_client does (size 28, protocol 7.0.0, zero
capabilities), then one reply per command, one client at a time (listen backlog 1). It prints the port
it listens on (port 0: one the kernel picks, as the unit tests of rpc_watch run it). With a third
argument N it stops reading after N commands without being stopped (the watch's stall path).
  python3 fake_rpc.py ADDRESS PORT [N]"""
import socket
import struct
import sys
import time

STALL_AFTER = int(sys.argv[3]) if len(sys.argv) > 3 else 0
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind((sys.argv[1], int(sys.argv[2])))
server.listen(1)
print(server.getsockname()[1], flush=True)
while True:
    client, dummy = server.accept()
    data = b""
    while len(data) < 33:
        chunk = client.recv(33 - len(data))
        if not chunk:
            break
        data += chunk
    if len(data) == 33 and data[0] == 14 and struct.unpack("<Q", data[1:9])[0] == 24:
        client.sendall(struct.pack("<Q", 28) + bytes([7, 0, 0, 0]) + bytes(24))
        served = 0
        while client.recv(4096):
            client.sendall(b"ok")
            served += 1
            if STALL_AFTER and served >= STALL_AFTER:
                time.sleep(10 ** 6)
    client.close()
