#!/bin/sh
# Run the worker's command (by default the example worker) with WORLD_SIZE set.
#
# Where WORLD_SIZE is not given, it is the number of the compose service's
# containers (`docker compose up --scale worker=N`): each one answers for the
# service's name ($ASYNCOLL_SERVICE, default worker) on the compose network's
# DNS. Compose starts them together; the count is taken once it has held for
# $ASYNCOLL_SETTLE_S seconds (default 3), and given up on after 60.
set -eu
if [ -z "${WORLD_SIZE:-}" ]; then
    service=${ASYNCOLL_SERVICE:-worker}
    settle=${ASYNCOLL_SETTLE_S:-3}
    count=0
    held=0
    waited=0
    while [ "$held" -lt "$settle" ]; do
        if [ "$waited" -ge 60 ]; then
            echo "entrypoint: the number of '$service' containers did not settle within" \
                 "60 s (last seen: $count); set WORLD_SIZE" >&2
            exit 2
        fi
        now=$(getent ahostsv4 "$service" | awk '{print $1}' | sort -u | wc -l)
        if [ "$now" -gt 0 ] && [ "$now" -eq "$count" ]; then
            held=$((held + 1))
        else
            count=$now
            held=0
        fi
        sleep 1
        waited=$((waited + 1))
    done
    echo "entrypoint: $count '$service' containers on this network: WORLD_SIZE=$count" >&2
    export WORLD_SIZE="$count"
fi
exec "$@"
