"""The deployment examples in deploy/ agree with each other and with the code.

The compose cluster runs for real in CI (.ci/compose-smoke); no Kubernetes
cluster can, so the manifests are checked here for what a typo would break.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from asyncoll._defaults import DEFAULT_PORT

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


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


def test_the_compose_cluster_builds_from_the_repository_root():
    with open(DEPLOY / "compose" / "docker-compose.yml", encoding="utf-8") as compose:
        services = yaml.safe_load(compose)["services"]
    for service in services.values():
        build = service["build"]
        assert build["context"] == "../.."
        assert (DEPLOY.parent / build["dockerfile"]).is_file(), build["dockerfile"]
