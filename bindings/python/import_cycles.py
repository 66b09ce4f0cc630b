"""Fails if the modules of the Python crate (src/*.rs) import each other in
a cycle. An import is any `crate::<module>` path in a module's code (`use`
lines and inline paths alike); `lib.rs`, the crate root, is left out.

    python3 bindings/python/import_cycles.py [src-dir]
"""

from __future__ import annotations

import pathlib
import re
import sys


def imports(src: pathlib.Path) -> dict[str, set[str]]:
    modules = {p.stem for p in src.glob("*.rs")} - {"lib"}
    graph: dict[str, set[str]] = {}
    for name in modules:
        code = (src / f"{name}.rs").read_text()
        code = re.sub(r"//.*", "", code)  # comments and doc comments
        used = set(re.findall(r"\bcrate::(\w+)", code))
        # `use crate::{a, b::C}` groups
        for group in re.findall(r"\bcrate::\{([^}]*)\}", code):
            used |= {part.strip().split("::")[0] for part in group.split(",")}
        graph[name] = (used & modules) - {name}
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def main() -> int:
    here = pathlib.Path(__file__).resolve().parent
    src = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else here / "src"
    found = cycle(imports(src))
    if found:
        print("import cycle in " + str(src) + ": " + " -> ".join(found))
        return 1
    print(f"   no import cycle among the {len(imports(src))} modules of {src.name}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
