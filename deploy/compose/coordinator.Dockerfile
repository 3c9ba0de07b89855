# The asyncoll coordinator daemon. Built by deploy/compose/docker-compose.yml, with the
# repository root as its context.
FROM python:3.11-slim
COPY . /src
# OFFLINE=1 installs from wheels prebuilt into build/wheels (CI builds with no network).
ARG OFFLINE=
RUN sh /src/deploy/compose/install-asyncoll.sh /src && rm -rf /src
COPY deploy/compose/coordinator-entrypoint.sh /entrypoint.sh
EXPOSE 29500
HEALTHCHECK --interval=1s --timeout=3s --start-period=2s --retries=60 \
    CMD ["/opt/asyncoll/bin/python", "-c", "import socket; socket.create_connection(('127.0.0.1', 29500), 2).close()"]
ENTRYPOINT ["/entrypoint.sh"]
