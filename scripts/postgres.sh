#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests of `cadence watch`'s shared store, from
# Debian's `postgresql` package (scripts/test.sh installs it when missing). It listens
# on a Unix socket in its own directory only (no TCP port), trusts local logins and
# keeps nothing when stopped.
#
#   scripts/postgres.sh start DIR    # prints a libpq connection string for user cadence
#   scripts/postgres.sh stop DIR
#
# As root the server runs as the package's `postgres` user (PostgreSQL refuses root).
set -euo pipefail

cmd=${1:?usage: scripts/postgres.sh start|stop DIR}
dir=${2:?usage: scripts/postgres.sh start|stop DIR}

bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
if [[ -z $bin ]]; then
    echo "error: no PostgreSQL server under /usr/lib/postgresql (Debian's package postgresql)" >&2
    exit 1
fi
as_pg=()
if [[ $(id -u) -eq 0 ]]; then
    as_pg=(runuser -u postgres --)
fi

case $cmd in
start)
    mkdir -p "$dir"
    if [[ $(id -u) -eq 0 ]]; then
        chown postgres "$dir"
        "${as_pg[@]}" test -w "$dir" || {
            echo "error: the postgres user cannot reach $dir (a parent directory is closed to it); use a directory under /tmp" >&2
            exit 1
        }
    fi
    "${as_pg[@]}" "$bin/initdb" -D "$dir/data" -U cadence --auth=trust \
        --no-sync -E UTF8 >"$dir/initdb.log" 2>&1 ||
        { cat "$dir/initdb.log" >&2; exit 1; }
    # No TCP listener; the socket in $dir. fsync off: the tests' data is disposable.
    "${as_pg[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
        -o "-c listen_addresses= -k $dir -c fsync=off -c full_page_writes=off" start \
        >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
    echo "host=$dir user=cadence dbname=postgres"
    ;;
stop)
    if [[ -d $dir/data ]]; then
        "${as_pg[@]}" "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
    ;;
*)
    echo "usage: scripts/postgres.sh start|stop DIR" >&2
    exit 2
    ;;
esac
