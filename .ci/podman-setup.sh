#!/usr/bin/env bash
# Makes this machine able to run the compose stack's e2e test (e2e/compose_test.go): installs Debian's podman,
# runc and podman-compose when missing and writes the container engine's configuration when there is none.
# Only root can; anywhere else it says why and does nothing (the test then skips itself with a message).
#
# The configuration is what works on CI's machines, which are themselves containers: no systemd (cgroupfs),
# runc rather than crun, no ulimits to copy, and the vfs storage driver (overlay needs a kernel module and a
# filesystem these machines lack). Files that already exist are left alone: they are the machine owner's.
set -euo pipefail

if [[ $(id -u) != 0 ]]; then
	echo "podman-setup: not root, not installing podman (the compose e2e test will skip)" >&2
	exit 0
fi

# netavark, podman's network backend, only suggests iptables, but it cannot set up a container's network without
# it ("netavark: No such file or directory"), and --no-install-recommends leaves it out: machines without it
# created every container of the stack and started none.
missing=()
for tool in podman runc podman-compose iptables; do
	command -v "$tool" >/dev/null || missing+=("$tool")
done
if ((${#missing[@]})); then
	echo "podman-setup: installing ${missing[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	packages=(podman runc podman-compose netavark aardvark-dns iptables)
	if ! apt-get install -y --no-install-recommends "${packages[@]}" >/dev/null; then
		apt-get update >/dev/null
		apt-get install -y --no-install-recommends "${packages[@]}" >/dev/null
	fi
fi

mkdir -p /etc/containers
if [[ ! -e /etc/containers/containers.conf ]]; then
	cat >/etc/containers/containers.conf <<'CONF'
# Written by Cairn's .ci/podman-setup.sh: podman inside a container without systemd.
[containers]
default_ulimits = []

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"

[network]
network_backend = "netavark"
CONF
fi
if [[ ! -e /etc/containers/storage.conf ]]; then
	cat >/etc/containers/storage.conf <<'CONF'
# Written by Cairn's .ci/podman-setup.sh: vfs needs no kernel support.
[storage]
driver = "vfs"
runroot = "/run/containers/storage"
graphroot = "/var/lib/containers/storage"
CONF
fi
podman --version
