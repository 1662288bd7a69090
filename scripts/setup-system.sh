#!/usr/bin/env bash
# System set-up for the netns and docker backends and the network faults, done by `make demo` and
# `make test`: Debian packages (Docker engine, iptables, iproute2, the NFQUEUE library, sshd and
# libfaketime for the ssh test lab, Slurm's daemons, clients and munge for the slurm test lab) and a running
# dockerd. Idempotent and quick when everything is there. Without root or apt-get it only says what
# is missing; those tests then skip (or fail under CI=true).
set -euo pipefail

PACKAGES=(docker.io iptables iproute2 util-linux libnetfilter-queue-dev procps fuse3 openssh-server faketime
          slurmctld slurmd slurm-client munge)
need=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    [ ${#need[@]} -eq 0 ] || echo "setup-system: not root or no apt-get; missing: ${need[*]} (netns/docker tests will skip)"
    exit 0
fi
if [ ${#need[@]} -gt 0 ]; then
    echo "setup-system: apt-get install ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# dockerd: no init system here, so start it ourselves and wait until it answers
if ! docker info >/dev/null 2>&1; then
    echo "setup-system: starting dockerd (log: /var/log/chaos-dockerd.log)"
    nohup dockerd >/var/log/chaos-dockerd.log 2>&1 &
    for _ in $(seq 1 60); do
        docker info >/dev/null 2>&1 && break
        sleep 0.5
    done
    docker info >/dev/null 2>&1 || { echo "setup-system: dockerd did not start; see /var/log/chaos-dockerd.log"; exit 1; }
fi
