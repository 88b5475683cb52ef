#!/bin/bash
# The standing p2 optimizer service where systemd is not at hand (p2-service.service is the same
# service under systemd): runs `p2 serve` in the foreground with the settings of ENV_FILE.
#
#   deploy/slurm/p2-service.sh [ENV_FILE]      (default /etc/p2/p2-service.env, if present)
#
# ENV_FILE holds KEY=VALUE lines (p2-service.env.example): P2_LISTEN (default 0.0.0.0:50051),
# and what p2 serve reads itself: P2_TOKEN_FILE, P2_STORE, P2_HTTP, P2_LOG_LEVEL. A service that
# listens beyond loopback needs a token: the script refuses to start without P2_TOKEN_FILE
# (or P2_TOKEN). SIGTERM or Ctrl-C stops it cleanly.

set -euo pipefail

die() {
    echo "p2-service.sh: error: $*" >&2
    exit 2
}

env_file=${1:-/etc/p2/p2-service.env}
if [ -e "$env_file" ]; then
    [ -r "$env_file" ] || die "cannot read $env_file"
    set -a
    # shellcheck disable=SC1090
    . "$env_file"
    set +a
elif [ "$#" -ge 1 ]; then
    die "no such file: $env_file"
fi

command -v p2 >/dev/null || die "p2 is not on PATH: activate the environment where the project is installed"
listen=${P2_LISTEN:-0.0.0.0:50051}
if [ -n "${P2_TOKEN_FILE:-}" ]; then
    [ -r "$P2_TOKEN_FILE" ] || die "P2_TOKEN_FILE $P2_TOKEN_FILE cannot be read"
elif [ -z "${P2_TOKEN:-}" ]; then
    case $listen in
        127.0.0.1:* | localhost:* | \[::1\]:*) ;;
        *) die "no token for a service on $listen: set P2_TOKEN_FILE (make one with 'openssl rand -hex 32')" ;;
    esac
fi
exec p2 serve --listen "$listen"
