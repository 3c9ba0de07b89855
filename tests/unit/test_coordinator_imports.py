"""Linters run as tests: the coordinator imports the control plane only, loads no data plane."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ._source import PACKAGE, asyncoll_imports_of, files, loaded_by, source_of, within

pytestmark = pytest.mark.timeout(60)


# -- the coordinator -------------------------------------------------------------------


@pytest.mark.parametrize("path", files("coordinator"),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_coordinator_module_never_imports_algorithms(path: Path) -> None:
    bad = sorted(n for n in asyncoll_imports_of(path)
                 if n == "asyncoll._algorithms" or n.startswith("asyncoll._algorithms."))

    assert bad == [], f"{path.relative_to(PACKAGE.parent)} imports {bad}"


def test_coordinator_reaches_algorithms_through_no_chain_of_imports() -> None:
    # Follow asyncoll-internal imports from the coordinator's modules. The
    # top-level asyncoll/__init__ (the sync API) is not followed: Python runs
    # it for any asyncoll.* import, but it is not what the daemon depends on.
    seen: dict[Path, Path | None] = {path: None for path in files("coordinator")}
    todo = list(seen)
    while todo:
        path = todo.pop()
        for name in asyncoll_imports_of(path):
            source = source_of(name)
            if source is None or source == PACKAGE / "__init__.py" or source in seen:
                continue
            seen[source] = path
            todo.append(source)

    reached = sorted(str(p.relative_to(PACKAGE.parent)) for p in seen
                     if (PACKAGE / "_algorithms") in p.parents)
    chains: list[str] = []
    for name in reached:
        chain: list[str] = []
        node: Path | None = PACKAGE.parent / name
        while node is not None:
            chain.append(str(node.relative_to(PACKAGE.parent)))
            node = seen[node]
        chains.append(" <- ".join(chain))
    assert chains == []


# -- the coordinator loads no data plane -----------------------------------------------

# What the daemon may import: the wire format, the rendezvous state machine and its
# control-message framing (not the peer-side client), errors, settings, the asyncio
# compatibility shims, the shared secret's challenge-response (_auth), TLS, and the
# version and the commands' output (which import only the standard library).
COORDINATOR_MAY_IMPORT = ("asyncoll._wire", "asyncoll._rendezvous", "asyncoll.errors",
                          "asyncoll._defaults", "asyncoll._compat", "asyncoll._auth",
                          "asyncoll._tls", "asyncoll._version", "asyncoll._stdout",
                          "asyncoll.coordinator")
COORDINATOR_MAY_NOT_IMPORT = ("asyncoll._rendezvous.client",)

# The data plane, by name, as the issue lists it.
DATA_PLANE = ("asyncoll._api.blocking", "asyncoll.group", "asyncoll._group.core",
              "asyncoll._runtime.session", "asyncoll._transport", "asyncoll._algorithms",
              "asyncoll.aio", "asyncoll._torch_backend", "asyncoll._group.tensors")


def _coordinator_may_import(name: str) -> bool:
    # The bare package is the base of `from asyncoll import _auth`; what such an
    # import names comes along as asyncoll._auth and is judged on its own.
    if name == "asyncoll":
        return True
    return within(name, COORDINATOR_MAY_IMPORT) and not within(name,
                                                                  COORDINATOR_MAY_NOT_IMPORT)


@pytest.mark.parametrize("path", files("coordinator"),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_coordinator_module_imports_only_wire_rendezvous_errors_and_settings(
        path: Path) -> None:
    bad = sorted(n for n in asyncoll_imports_of(path) if not _coordinator_may_import(n))
    plain = [alias.name for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Import) for alias in node.names
             if alias.name == "asyncoll"]

    assert bad == [], f"{path.relative_to(PACKAGE.parent)} imports {bad}"
    assert plain == [], f"{path.relative_to(PACKAGE.parent)} imports the asyncoll package"


@pytest.mark.parametrize("name", ["asyncoll._transport.tcp.mesh", "asyncoll._algorithms",
                                  "asyncoll._runtime.session", "asyncoll.group",
                                  "asyncoll._api.blocking", "asyncoll.all_reduce", "asyncoll.aio",
                                  "asyncoll._rendezvous.client",
                                  "asyncoll._rendezvous.client.RendezvousClient",
                                  "asyncoll._wiremesh", "asyncoll.errors_extra"])
def test_the_coordinator_import_rule_refuses_the_data_plane(name: str) -> None:
    assert not _coordinator_may_import(name)


@pytest.mark.parametrize("name", ["asyncoll", "asyncoll._wire.messages.Challenge",
                                  "asyncoll._rendezvous.state", "asyncoll.errors",
                                  "asyncoll._defaults.DEFAULT_PORT", "asyncoll._compat",
                                  "asyncoll._auth", "asyncoll.coordinator.server"])
def test_the_coordinator_import_rule_allows_the_control_plane(name: str) -> None:
    assert _coordinator_may_import(name)


def test_importing_the_coordinator_loads_no_module_of_the_data_plane() -> None:
    # Every module of the daemon (its __main__ only runs cli.main).
    loaded = loaded_by("import asyncoll.coordinator, asyncoll.coordinator.cli, "
                        "asyncoll.coordinator.server")

    data_plane = [name for name in loaded if within(name, DATA_PLANE)]
    assert data_plane == [], f"import asyncoll.coordinator loaded {data_plane}"
    # What else it loads is the control plane the daemon may import, and the two
    # cheap faces asyncoll/__init__ binds eagerly.
    others = [name for name in loaded if not _coordinator_may_import(name)
              and name not in ("asyncoll.errors", "asyncoll.types")]
    assert others == [], f"import asyncoll.coordinator loaded {others}"
