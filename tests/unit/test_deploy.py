"""The deployment examples agree with each other and with the code: the compose
cluster (docker-compose.yml, server/, client/) and the manifests in deploy/.

The compose cluster runs for real in CI (.ci/compose-smoke); no Kubernetes
cluster can, so the manifests are checked here for what a typo would break.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from asyncoll._defaults import DEFAULT_PORT

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def _documents(name: str) -> dict[str, dict]:
    with open(DEPLOY / "kubernetes" / name, encoding="utf-8") as manifest:
        return {document["kind"]: document for document in yaml.safe_load_all(manifest)}


def _env(container: dict) -> dict[str, dict]:
    return {variable["name"]: variable for variable in container["env"]}


def test_the_coordinators_deployment_and_service_serve_the_default_port():
    coordinator = _documents("coordinator.yaml")
    assert set(coordinator) == {"Deployment", "Service"}
    deployment, service = coordinator["Deployment"], coordinator["Service"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"] == labels
    assert service["spec"]["selector"] == labels
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert [p["containerPort"] for p in container["ports"]] == [DEFAULT_PORT]
    assert [p["port"] for p in service["spec"]["ports"]] == [DEFAULT_PORT]


def test_the_workers_indexed_job_joins_that_service_with_one_rank_per_index():
    job = _documents("workers.yaml")["Job"]
    service = _documents("coordinator.yaml")["Service"]
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    [container] = spec["template"]["spec"]["containers"]
    env = _env(container)
    assert env["MASTER_ADDR"]["value"] == service["metadata"]["name"]
    assert env["MASTER_PORT"]["value"] == str(DEFAULT_PORT)
    # Every rank at once: a collective waits for all of them.
    assert spec["completions"] == spec["parallelism"] == int(env["WORLD_SIZE"]["value"])
    assert env["RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['batch.kubernetes.io/job-completion-index']")


def _compose_services() -> dict[str, dict]:
    with open(ROOT / "docker-compose.yml", encoding="utf-8") as compose:
        return yaml.safe_load(compose)["services"]


def test_the_compose_cluster_builds_each_image_from_its_folder_with_the_root_as_context():
    services = _compose_services()
    assert {name: service["build"]["dockerfile"] for name, service in services.items()} == {
        "coordinator": "server/Dockerfile", "worker": "client/Dockerfile"}
    for service in services.values():
        assert service["build"]["context"] == "."
        assert (ROOT / service["build"]["dockerfile"]).is_file()
        # `up` builds, and never tries to pull a local tag from a registry first.
        assert service["pull_policy"] == "build"


def test_the_compose_workers_leave_their_number_to_scale_and_their_ranks_to_the_coordinator():
    worker = _compose_services()["worker"]
    # --scale worker=N decides WORLD_SIZE (client/entrypoint.sh counts the containers).
    assert not {"WORLD_SIZE", "RANK"} & set(worker["environment"])
    assert worker["environment"]["MASTER_ADDR"] == "coordinator"
    assert worker["environment"]["MASTER_PORT"] == str(DEFAULT_PORT)
    assert worker["depends_on"] == {"coordinator": {"condition": "service_healthy"}}


def _probe_port(command: list[str]) -> str:
    """The port ``asyncoll-coordinator --probe --port P`` checks, from its command line."""
    assert Path(command[0]).name == "asyncoll-coordinator" and "--probe" in command
    return command[command.index("--port") + 1]


def test_the_coordinators_health_checks_greet_it_instead_of_resetting_a_connection():
    dockerfile = (ROOT / "server" / "Dockerfile").read_text(encoding="utf-8")
    [check] = re.findall(r"^HEALTHCHECK .*?\bCMD (.*)$", dockerfile, re.MULTILINE | re.DOTALL)
    assert _probe_port(check.replace('"', "").split()) == "$ASYNCOLL_PORT"
    assert f"ENV ASYNCOLL_PORT={DEFAULT_PORT}" in dockerfile
    [container] = _documents("coordinator.yaml")["Deployment"]["spec"]["template"]["spec"][
        "containers"]
    assert _probe_port(container["readinessProbe"]["exec"]["command"]) == str(DEFAULT_PORT)


def _entrypoint(tmp_path: Path, environment: dict[str, str]) -> str:
    """What client/entrypoint.sh gives its command as WORLD_SIZE, with getent faked:
    each call answers for one more container of the service, up to four."""
    (tmp_path / "getent").write_text(
        "#!/bin/sh\n"
        '[ "$1 $2" = "ahostsv4 worker" ] || exit 2\n'
        'calls=$(($(cat "$0.calls" 2>/dev/null || echo 0) + 1)); echo $calls >"$0.calls"\n'
        "for i in $(seq $((calls < 3 ? calls + 1 : 4))); do\n"
        '  for kind in STREAM DGRAM RAW; do echo "10.0.0.$i $kind worker"; done\n'
        "done\n", encoding="utf-8")
    (tmp_path / "getent").chmod(0o755)
    env = {**{k: v for k, v in os.environ.items() if k != "WORLD_SIZE"}, **environment,
           "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}", "ASYNCOLL_SETTLE_S": "1"}
    result = subprocess.run(["sh", str(ROOT / "client" / "entrypoint.sh"), "sh", "-c",
                             'echo "$WORLD_SIZE"'], env=env, capture_output=True, text=True,
                            timeout=30, check=True)
    return result.stdout.strip()


@pytest.mark.timeout(60)
def test_a_worker_counts_the_services_containers_until_the_count_holds(tmp_path):
    assert _entrypoint(tmp_path, {}) == "4"
    assert (tmp_path / "getent.calls").read_text().strip() == "4"  # 2, 3, 4, 4 containers


@pytest.mark.timeout(60)
def test_a_worker_given_world_size_keeps_it_and_counts_nothing(tmp_path):
    assert _entrypoint(tmp_path, {"WORLD_SIZE": "7"}) == "7"
    assert not (tmp_path / "getent.calls").exists()


# -- the build context -------------------------------------------------------------------

def _ignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    """.dockerignore's patterns as (re-included, regular expression), in order."""
    rules = []
    for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keep, pattern = line.startswith("!"), line.lstrip("!").strip("/")
        parts = re.split(r"(\*\*/|\*\*|\*|\?)", pattern)
        regex = "".join({"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(
            part, re.escape(part)) for part in parts)
        rules.append((keep, re.compile(regex)))
    return rules


def _admitted(path: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether docker sends ``path`` in the build context: the last pattern that matches
    it or a folder above it decides."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    admitted = True
    for keep, regex in rules:
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            admitted = keep
    return admitted


def test_the_build_context_holds_what_installs_asyncoll_and_the_images_own_files():
    rules = _ignore_rules()
    needed = ["pyproject.toml", "setup.py", "README.md", "LICENSE",
              "build/wheels/asyncoll-0.1.0-cp311-cp311-linux_x86_64.whl",
              *(str(p.relative_to(ROOT)) for p in ROOT.glob("asyncoll/**/*")
                if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".so")]
    for dockerfile in ("server/Dockerfile", "client/Dockerfile"):
        text = (ROOT / dockerfile).read_text(encoding="utf-8")
        needed += [source for source in re.findall(r"^COPY (\S+) ", text, re.MULTILINE)
                   if source != "."]
    assert len(needed) > 100
    assert [path for path in needed if not _admitted(path, rules)] == []


def test_the_build_context_leaves_out_the_site_builds_venvs_and_caches():
    rules = _ignore_rules()
    unwanted = ["site/index.html", "asyncoll/_native/_arena.cpython-311-x86_64-linux-gnu.so",
                "build/lib.linux-x86_64-cpython-311/asyncoll/__init__.py",
                "build/temp.linux-x86_64-cpython-311/asyncoll/_native/arena.o",
                ".venv/bin/python", "venv/bin/python", ".ci-venv-3.12/bin/python",
                ".ci-compose.log", ".mypy_cache/3.11/x.json", ".pytest_cache/README.md",
                ".ruff_cache/x", ".hypothesis/examples/x", "asyncoll/__pycache__/x.pyc",
                "asyncoll.egg-info/PKG-INFO", "dist/asyncoll-0.1.0.tar.gz", ".git/HEAD",
                "tests/unit/test_deploy.py", "docs/index.md", "benchmarks/scale.py"]
    assert [path for path in unwanted if _admitted(path, rules)] == []
