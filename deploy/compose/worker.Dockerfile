# A demo asyncoll worker. Built by deploy/compose/docker-compose.yml, with the repository
# root as its context.
FROM python:3.11-slim
COPY . /src
# OFFLINE=1 installs from wheels prebuilt into build/wheels (CI builds with no network).
ARG OFFLINE=
RUN sh /src/deploy/compose/install-asyncoll.sh /src && rm -rf /src
COPY deploy/compose/demo_worker.py /app/demo_worker.py
ENTRYPOINT ["/opt/asyncoll/bin/python", "/app/demo_worker.py"]
