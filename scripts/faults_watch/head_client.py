"""A stand-in head: HELLO, then one small command a second, each answer awaited 3 s."""
import socket
import struct
import sys
import time

sock = socket.create_connection((sys.argv[1], int(sys.argv[2])))
sock.sendall(bytes([14]) + struct.pack("<Q", 24) + bytes(24))
reply = b""
while len(reply) < 36:
    reply += sock.recv(36 - len(reply))
print("hello ok", reply[8:11], flush=True)
sock.settimeout(3)
while True:
    began = time.time()
    try:
        sock.sendall(b"x" * 200)
        if not sock.recv(16):
            print("%.1f closed" % began, flush=True)
            break
    except OSError as exc:
        print("%.1f %s" % (began, exc), flush=True)
        break
    time.sleep(1)
