#!/bin/sh
# Install asyncoll from the checkout at $1 into the venv /opt/asyncoll.
# Shared by coordinator.Dockerfile and worker.Dockerfile. With OFFLINE set, only the
# wheels prebuilt into build/wheels are used (CI builds with no network).
set -eu
src=${1:?usage: install-asyncoll.sh SOURCE_DIR}
python3 -m venv /opt/asyncoll
if [ -n "${OFFLINE:-}" ]; then
    /opt/asyncoll/bin/pip install --no-index --find-links "$src/build/wheels" asyncoll
else
    /opt/asyncoll/bin/pip install "$src"
fi
