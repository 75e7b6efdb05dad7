#!/usr/bin/env bash
# Builds the container lab's base image locally with debootstrap (no registry is reachable).
# The tag carries a hash of this script, so a changed package list builds a new image and an
# unchanged one is reused.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
packages=(
  python3 systemd systemd-sysv dbus sudo iproute2 procps ca-certificates
  build-essential cmake ninja-build ccache nftables curl netcat-openbsd less openssh-server
  prometheus prometheus-node-exporter
)
tag_hash=$(sha256sum "$here/build-image.sh" | cut -c1-12)
image="${GPULAB_LAB_IMAGE:-localhost/gpulab-lab:bookworm-$tag_hash}"

if [ "${1:-}" = "--print-name" ]; then
  echo "$image"
  exit 0
fi

if podman image exists "$image"; then
  echo "lab image: $image (cached)"
  exit 0
fi

mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
mirror=${mirror:-http://deb.debian.org/debian}
rootfs=$(mktemp -d /var/tmp/gpulab-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT

echo "lab image: debootstrap bookworm from $mirror (a few minutes on 2 cores)"
include=$(IFS=,; echo "${packages[*]}")
debootstrap --variant=minbase --include="$include" bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 || {
  tail -n 30 "$rootfs.log"; exit 1; }
rm -f "$rootfs.log"

# A container has no consoles or udev to wait for; these units only slow boots down.
for unit in systemd-udevd.service systemd-udev-trigger.service getty@tty1.service \
            systemd-logind.service console-getty.service systemd-timesyncd.service; do
  ln -sf /dev/null "$rootfs/etc/systemd/system/$unit"
done
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
# The packages enable their own units (Prometheus on *:9090, the exporter on *:9100): role monitoring
# runs the same binaries bound and firewalled, so the image starts neither.
rm -f "$rootfs"/etc/systemd/system/*.wants/prometheus*.service "$rootfs"/etc/systemd/system/*.wants/prometheus*.timer

# Host keys made at install time would be shared by every node: each container makes its own
# when sshd first starts. Keys only, no passwords, no root login, as on a hardened lab node.
rm -f "$rootfs"/etc/ssh/ssh_host_*
mkdir -p "$rootfs/etc/systemd/system/ssh.service.d"
cat >"$rootfs/etc/systemd/system/ssh.service.d/gpulab-host-keys.conf" <<'UNIT'
[Service]
ExecStartPre=
ExecStartPre=/usr/bin/ssh-keygen -A
ExecStartPre=/usr/sbin/sshd -t
UNIT
cat >"$rootfs/etc/ssh/sshd_config.d/gpulab-lab.conf" <<'CONF'
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
CONF

tar -C "$rootfs" -c . | podman import \
  --change 'CMD ["/lib/systemd/systemd"]' --change 'ENV container=podman' \
  --change 'STOPSIGNAL SIGRTMIN+3' - "$image" >/dev/null
echo "lab image: $image built"
