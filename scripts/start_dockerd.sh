#!/usr/bin/env bash
# Makes sure a Docker daemon answers on this host (root): installs what the docker tests use from
# Debian's packages when missing (docker.io; debootstrap, which scripts/docker_image.sh builds the
# image with; openssh-server, whose sshd the ssh:// test starts on its own port), then starts
# dockerd without iptables rules or a bridge (containers run with host networking) unless one
# already answers. Its log: ~/.cache/autotune/dockerd.log (AUTOTUNE_CACHE moves it).
set -euo pipefail
cache="${AUTOTUNE_CACHE:-$HOME/.cache/autotune}"
if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1 || [ ! -x /usr/sbin/sshd ]; then
    # packages must not start services here (no system sshd on port 22): a policy-rc.d says so
    # for the install, unless the machine has its own
    policy=/usr/sbin/policy-rc.d
    made_policy=
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && made_policy=1
    fi
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io debootstrap openssh-server >/dev/null
    if [ -n "$made_policy" ]; then rm -f "$policy"; fi
fi
if docker info >/dev/null 2>&1; then
    exit 0
fi
mkdir -p "$cache"
setsid dockerd --iptables=false --bridge=none >>"$cache/dockerd.log" 2>&1 </dev/null &
for _ in $(seq 60); do
    docker info >/dev/null 2>&1 && exit 0
    sleep 0.5
done
tail -n 20 "$cache/dockerd.log" >&2
echo "start_dockerd.sh: dockerd did not answer within 30 s" >&2
exit 1
