#!/usr/bin/env bash
# Start a private, throw-away PostgreSQL cluster for trying pgoutbox locally.
#
# Usage: scripts/dev-postgres.sh start|stop|url [dir]
#   start  initdb (as user postgres when run as root: initdb refuses root) in a
#          fresh directory, wal_level=logical, on a free loopback port; prints the URL.
#   stop   stop it and delete the directory.
#   url    print the connection URL of the running dev cluster.
# The cluster lives in ${PGOUTBOX_DEV_DIR:-/tmp/pgoutbox-dev-$USER}: one per user, and
# not under $HOME, which the postgres user may not be able to enter. Uses
# `pg_config --bindir` binaries.
set -euo pipefail

dir=${PGOUTBOX_DEV_DIR:-/tmp/pgoutbox-dev-$(id -un)}
bindir=${PGOUTBOX_PG_BINDIR:-$(pg_config --bindir)}
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

case "${1:-}" in
start)
  if [ -f "$dir/port" ] && as_pg "$bindir/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
    echo "postgres://postgres@127.0.0.1:$(cat "$dir/port")/postgres?sslmode=disable"
    exit 0
  fi
  rm -rf "$dir"
  mkdir -p "$dir"
  [ "$(id -u)" = 0 ] && chown postgres:postgres "$dir"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  as_pg "$bindir/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --locale=C >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; exit 1; }
  as_pg sh -c "cat >> '$dir/data/postgresql.auto.conf'" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
wal_level = logical
max_wal_senders = 10
max_replication_slots = 10
CONF
  as_pg "$bindir/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w start >/dev/null
  echo "$port" > "$dir/port"
  echo "postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
  ;;
stop)
  [ -d "$dir/data" ] && as_pg "$bindir/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  rm -rf "$dir"
  ;;
url)
  echo "postgres://postgres@127.0.0.1:$(cat "$dir/port")/postgres?sslmode=disable"
  ;;
*)
  echo "usage: $0 start|stop|url" >&2
  exit 2
  ;;
esac
