"""The package's import graph: no import circles in `locsum_sdk` or `train` (type-only and function-level imports
counted), none either between the rooms of `locsum_sdk` (its top-level modules, and each folder as one: docs/design.md
gives their order), and the bottom layers (`errors`, `constants`, `ops`, `kernels`) import nothing above them."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOTTOM = {"locsum_sdk.errors": set(), "locsum_sdk.constants": set(),
          "locsum_sdk.ops": {"locsum_sdk.errors", "locsum_sdk.constants"},
          "locsum_sdk.kernels": {"locsum_sdk.errors", "locsum_sdk.constants", "locsum_sdk.ops"}}


def modules() -> dict[str, Path]:
    found = {}
    for package in ("locsum_sdk", "train"):
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules `name` imports anywhere in its source (parent packages left out: importing a
    submodule runs them anyway, which is no circle of ours)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else node.module
            targets = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known] or [base]
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            continue
        out.update(t for t in targets if t in known and t != name and not name.startswith(t + "."))
    return out


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def rooms(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """`locsum_sdk`'s part of the graph with each top-level module and each folder as one node."""
    def room(name: str) -> str:
        return ".".join(name.split(".")[:2])

    out: dict[str, set[str]] = {}
    for name, targets in edges.items():
        if name.startswith("locsum_sdk."):
            out.setdefault(room(name), set()).update(
                room(t) for t in targets if t.startswith("locsum_sdk.") and room(t) != room(name))
    for targets in list(out.values()):
        for target in targets:
            out.setdefault(target, set())
    return out


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in edges:
        if node not in index:
            visit(node)
    return found


def test_no_import_circles():
    assert circles(graph()) == []


def test_the_packages_rooms_import_one_way():
    assert circles(rooms(graph())) == []


def test_the_bottom_layers_import_nothing_above_them():
    edges = graph()
    for layer, allowed in BOTTOM.items():
        for name, targets in edges.items():
            if name == layer or name.startswith(layer + "."):
                above = {t for t in targets if not any(t == a or t.startswith(a + ".") for a in {layer, *allowed})}
                assert not above, f"{name} imports {sorted(above)}"
