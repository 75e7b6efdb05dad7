#!/usr/bin/env bash
# What a lab's admin does once per node before the first run, done through podman since no SSH
# access exists yet: the user gpulab with passwordless sudo and the controller's key, sshd (it
# makes the node's host keys on its first start), and the GPU test doubles: the fake nvidia-smi
# (a TEST DOUBLE replaying captured output) and the node's GPU profile for it.
# Four podman calls per node: each Ansible task through the podman connection costs a podman exec
# (about 150 ms of CPU) or more, and the lab is created once per molecule scenario.
# Safe to run again on a running node (make lab twice). Prints the node's ed25519 host key
# ("ssh-ed25519 AAAA...") on stdout, read from the node itself: never trusted on first use.
# Usage: node-setup.sh CONTAINER PUBLIC_KEY_FILE FAKE_NVIDIA_SMI_DIR [GPU_PROFILE]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
container=$1
public_key=$(cat "$2")
smi_dir=$3
profile=${4:-}

podman exec "$container" mkdir -p "$smi_dir"
podman cp "$here/files/fake-nvidia-smi" "$container:/usr/local/bin/nvidia-smi"
if [ -n "$profile" ]; then
  podman cp "$here/files/nvidia-smi/$profile/." "$container:$smi_dir/"
fi

# shellcheck disable=SC2016 # expanded inside the node
podman exec "$container" /bin/bash -c '
set -euo pipefail
key=$1 smi_dir=$2
chown root:root /usr/local/bin/nvidia-smi && chmod 0755 /usr/local/bin/nvidia-smi
chown -R root:root "$smi_dir" && find "$smi_dir" -type f -exec chmod 0644 {} +
id -u gpulab >/dev/null 2>&1 || useradd --create-home --shell /bin/bash gpulab
printf "gpulab ALL=(ALL) NOPASSWD: ALL\n" >/etc/sudoers.d/.gpulab.new
chmod 0440 /etc/sudoers.d/.gpulab.new
visudo -cqf /etc/sudoers.d/.gpulab.new
mv /etc/sudoers.d/.gpulab.new /etc/sudoers.d/gpulab
install -d -o gpulab -g gpulab -m 0700 /home/gpulab/.ssh
printf "%s\n" "$key" >/home/gpulab/.ssh/authorized_keys
chown gpulab:gpulab /home/gpulab/.ssh/authorized_keys && chmod 0600 /home/gpulab/.ssh/authorized_keys
systemctl enable --quiet --now ssh.service
cut -d" " -f1,2 /etc/ssh/ssh_host_ed25519_key.pub
' node-setup "$public_key" "$smi_dir"
