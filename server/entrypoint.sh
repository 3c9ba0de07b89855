#!/bin/sh
# Run the coordinator on every interface of the container (its network is the
# compose project's internal one), on $ASYNCOLL_PORT (default 29500). Extra
# arguments (the service's command) go to asyncoll-coordinator: --http-port,
# --log-level, --token-file, ... (asyncoll-coordinator --help).
exec /opt/asyncoll/bin/asyncoll-coordinator --host 0.0.0.0 --port "${ASYNCOLL_PORT:-29500}" "$@"
