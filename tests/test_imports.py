"""Imports run one way: the graph of every import (module-level or inside a function)
among attention_lab/, configs/ and experiments/ has no cycle; nothing imports `jax._src`;
the installed package holds no benchmark or test fixture."""

import ast
import pathlib

import pytest

REPO = pathlib.Path(__file__).parents[1]
PACKAGES = ("attention_lab", "configs", "experiments")


def _modules() -> dict[str, pathlib.Path]:
  out = {}
  for package in PACKAGES:
    for path in (REPO / package).rglob("*.py"):
      parts = path.relative_to(REPO).with_suffix("").parts
      out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
  return out


def _imports(name: str, path: pathlib.Path, known) -> set[str]:
  """The project modules `name` imports (`from a import b`: a.b when it is a module)."""
  found = set()
  package = name if path.name == "__init__.py" else name.rpartition(".")[0]
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Import):
      targets = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                        + ([base] if base else []))
      targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                 for alias in node.names]
    else:
      continue
    found.update(t for t in targets if t in known and t != name)
  return found


def _graph():
  modules = _modules()
  return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycle(graph) -> list[str] | None:
  state = {}

  def visit(node, trail):
    state[node] = "open"
    for nxt in sorted(graph[node]):
      if state.get(nxt) == "open":
        return trail[trail.index(nxt):] + [nxt]
      if nxt not in state:
        found = visit(nxt, trail + [nxt])
        if found:
          return found
    state[node] = "done"
    return None

  for start in sorted(graph):
    if start not in state:
      found = visit(start, [start])
      if found:
        return found
  return None


def test_the_import_graph_is_acyclic():
  graph = _graph()
  assert len(graph) > 100 and sum(map(len, graph.values())) > 200  # the walk saw the code
  assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_a_cycle_is_found():
  assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
  assert _cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("package", PACKAGES + ("tests",))
def test_no_private_jax(package):
  private = "jax." + "_src"
  users = [str(p.relative_to(REPO)) for p in (REPO / package).rglob("*.py")
           if private in p.read_text() and p != pathlib.Path(__file__)]
  assert not users


def test_the_package_ships_no_benchmark_or_fixture():
  """Benchmarks live in experiments/, fixtures in tests/: the package imports neither."""
  graph = _graph()
  assert not [m for m, imported in graph.items() if m.startswith("attention_lab")
              and any(i.startswith(("experiments", "configs")) for i in imported)]
  sources = [p.read_text() for p in (REPO / "attention_lab").rglob("*.py")]
  assert not [s for s in sources if "import pytest" in s or "from tests" in s]
  assert not list((REPO / "attention_lab").rglob("*throughput*.py"))
  assert not list((REPO / "attention_lab").rglob("fake_files.py"))
