"""What the rule tests share: the package's files, their modules and imports."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import asyncoll

PACKAGE = Path(asyncoll.__file__).resolve().parent


def from_base(node: ast.ImportFrom, module: str) -> str:
    """The absolute module a from-import in ``module`` imports from."""
    base = node.module or ""
    if node.level:
        parts = module.rsplit(".", 1)[0].split(".")
        parent = ".".join(parts[:len(parts) - node.level + 1])
        base = f"{parent}.{base}" if base else parent
    return base


def imports(tree: ast.AST, module: str) -> set[str]:
    """Every module name (and module.name for from-imports) the source imports."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = from_base(node, module)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def files(subpackage: str) -> list[Path]:
    return sorted((PACKAGE / subpackage).rglob("*.py"))


def asyncoll_imports_of(path: Path) -> set[str]:
    return {name for name in imports(ast.parse(path.read_text()), module_name(path))
            if name == "asyncoll" or name.startswith("asyncoll.")}


def source_of(name: str) -> Path | None:
    parts = Path(*name.split("."))
    for candidate in (PACKAGE.parent / parts.with_suffix(".py"),
                      PACKAGE.parent / parts / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None  # a name imported from a module, not a module


def within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(f"{prefix}.") for prefix in prefixes)


def python(code: str) -> str:
    """What a fresh interpreter prints running ``code``."""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def loaded_by(statement: str) -> list[str]:
    """The asyncoll modules a fresh interpreter holds after running ``statement``."""
    return python(f"{statement}\nimport sys\n"
                  "print('\\n'.join(sorted(m for m in sys.modules "
                  "if m == 'asyncoll' or m.startswith('asyncoll.'))))").split()


def dotted(node: ast.AST) -> str:
    """``a.b.c`` for a Name or an Attribute chain, else ""."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    parts.append(node.id)
    return ".".join(reversed(parts))


def package_files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def relative(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def is_in(path: Path, places: tuple[str, ...]) -> bool:
    name = relative(path)
    return any(name.startswith(place) if place.endswith("/") else name == place
               for place in places)
