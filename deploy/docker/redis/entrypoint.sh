#!/bin/sh
# Start redis-server with the password of REDIS_PASSWORD_FILE (default: the compose
# secret). redis-server reads passwords only from its config or command line, so
# the config is written here, readable by this user alone, in a fresh temporary
# folder: the password is never in the image, an argument or an environment.
set -eu
password_file=${REDIS_PASSWORD_FILE:-/run/secrets/redis_password}
[ -r "$password_file" ] || { echo "p2-redis: cannot read the password file $password_file" >&2; exit 1; }
password=$(tr -d '\r\n' < "$password_file")
[ -n "$password" ] || { echo "p2-redis: $password_file is empty" >&2; exit 1; }
case $password in *'"'*|*'\'*|*' '*) echo "p2-redis: the password must not hold quotes, backslashes or spaces" >&2; exit 1;; esac
umask 077
folder=$(mktemp -d)
printf 'requirepass "%s"\ninclude /etc/p2/redis.conf\n' "$password" > "$folder/redis.conf"
exec redis-server "$folder/redis.conf" "$@"
