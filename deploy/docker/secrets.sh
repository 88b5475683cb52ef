#!/usr/bin/env bash
# Make the compose stack's secrets, once: the service's bearer token, Redis'
# password and Grafana's admin password, random, each in its own file under
# deploy/docker/secrets/ (git-ignored; P2_SECRETS_DIR for another folder, which
# docker-compose.yml reads from the same variable). An existing file is kept.
#
#   deploy/docker/secrets.sh
#
# The folder is the owner's alone (0700); the files in it are readable by the
# containers' own users (0644), which read them as bind mounts at /run/secrets/.
# The values are hex: the Redis password sits in the service's store URL as is.
set -euo pipefail
cd "$(dirname "$0")/../.."
folder=${P2_SECRETS_DIR:-deploy/docker/secrets}
mkdir -p "$folder"
chmod 700 "$folder"
for name in p2_token redis_password grafana_admin_password; do
    if [ ! -s "$folder/$name" ]; then
        (umask 022; od -An -N32 -tx1 /dev/urandom | tr -d ' \n' > "$folder/$name")
        echo "secrets: made $folder/$name" >&2
    fi
done
