#!/bin/sh
# Run the coordinator on every interface of the container (its network is the
# compose project's internal one). Extra arguments go to asyncoll-coordinator.
exec /opt/asyncoll/bin/asyncoll-coordinator --host 0.0.0.0 --port "${ASYNCOLL_PORT:-29500}" "$@"
