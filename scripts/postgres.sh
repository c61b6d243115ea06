#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests of `cadence watch`'s shared store, from
# Debian's `postgresql` package (scripts/test.sh installs it when missing). It listens
# on a Unix socket in its own directory and, with TLS only, on a free TCP port of
# 127.0.0.1 (its certificate signed by a CA made for it, DIR/ca.pem); it trusts local
# logins and keeps nothing when stopped.
#
#   scripts/postgres.sh start DIR    # prints a libpq connection string for user cadence
#                                    # (the socket); DIR/tls holds the TLS one
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
    # A CA and a server certificate for 127.0.0.1, for the TLS tests.
    (
        cd "$dir"
        openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 \
            -subj "/CN=cadence test CA" -addext "basicConstraints=critical,CA:TRUE" \
            -addext "keyUsage=critical,keyCertSign,cRLSign"
        openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr \
            -subj "/CN=127.0.0.1"
        printf '%s\n' "basicConstraints=CA:FALSE" "extendedKeyUsage=serverAuth" \
            "subjectAltName=IP:127.0.0.1,DNS:localhost" >server.ext
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
            -out server.crt -days 2 -extfile server.ext
        chmod 600 server.key
        [[ $(id -u) -eq 0 ]] && chown postgres server.key server.crt
    ) >"$dir/openssl.log" 2>&1 || { cat "$dir/openssl.log" >&2; exit 1; }
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    # TCP on 127.0.0.1 only, TLS required there (hostssl); the socket in $dir. fsync
    # off: the tests' data is disposable.
    printf '%s\n' "local all all trust" "hostssl all all 127.0.0.1/32 trust" \
        >"$dir/data/pg_hba.conf"
    "${as_pg[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off -c full_page_writes=off -c ssl=on -c ssl_cert_file=$dir/server.crt -c ssl_key_file=$dir/server.key" \
        start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
    echo "host=127.0.0.1 port=$port user=cadence dbname=postgres sslmode=require" >"$dir/tls"
    echo "host=$dir port=$port user=cadence dbname=postgres"
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
