# managed by gpulab.inference
# A minimal `ss` for hosts without iproute2 (some GPU container images): scripts/gpu-e2e.sh puts it on
# PATH as `ss` only when the real one is missing. It reads /proc/net/tcp and /proc/net/tcp6 and
# answers the two command lines the collection issues, in ss's own column layout:
#   ss -Hltn src ADDR sport = :PORT     listening sockets (State Recv-Q Send-Q Local Peer)
#   ss -Htn state established           established connections (Recv-Q Send-Q Local Peer)
import ipaddress
import socket
import struct
import sys

STATES = {"01": "ESTAB", "0A": "LISTEN"}


def decode(hex_addr):
    ip_hex, port_hex = hex_addr.split(":")
    raw = bytes.fromhex(ip_hex)
    if len(raw) == 4:
        ip = socket.inet_ntop(socket.AF_INET, struct.pack("<I", int(ip_hex, 16)))
        return ip, int(port_hex, 16), False
    words = struct.unpack("<4I", raw)
    ip = ipaddress.IPv6Address(struct.pack(">4I", *words))
    if ip.ipv4_mapped:
        return str(ip.ipv4_mapped), int(port_hex, 16), False
    return str(ip), int(port_hex, 16), True


def sockets():
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path, encoding="ascii") as handle:
                lines = handle.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            lip, lport, v6 = decode(fields[1])
            rip, rport = decode(fields[2])[:2]
            yield fields[3], lip, lport, rip, rport, v6


def endpoint(ip, port, v6):
    return "[%s]:%d" % (ip, port) if v6 else "%s:%d" % (ip, port)


def main(argv):
    flags = set()
    state = None
    src = None
    sport = None
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg.startswith("-") and not arg.startswith("--"):
            flags.update(arg[1:])
        elif arg == "state":
            state = args.pop(0)
        elif arg == "src":
            src = args.pop(0)
        elif arg == "sport":
            if args and args[0] == "=":
                args.pop(0)
            sport = int(args.pop(0).lstrip(":"))
        else:
            sys.stderr.write("ss-proc: unsupported argument %s\n" % arg)
            return 2
    want = "0A" if "l" in flags else ("01" if state == "established" else None)
    for st, lip, lport, rip, rport, v6 in sockets():
        if want and st != want:
            continue
        if src is not None and lip != src:
            continue
        if sport is not None and lport != sport:
            continue
        local = endpoint(lip, lport, v6)
        peer = "*" if st == "0A" else endpoint(rip, rport, v6)
        if state:
            print("0 0 %s %s" % (local, peer))
        else:
            print("%s 0 0 %s %s" % (STATES.get(st, st), local, peer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
