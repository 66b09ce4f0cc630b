"""The binding and its framework integrations sit apart (issue 40 item 8).

``mistri_locks.integrations`` holds the Celery, Django, Dramatiq and WSGI
faces (RQ needs none: ``mistri_locks.leased`` as is); ``import
mistri_locks`` imports none of them and no framework, and the binding's own
modules never import them.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import pathlib
import subprocess
import sys

import mistri_locks

PACKAGE = pathlib.Path(mistri_locks.__file__).parent
INTEGRATIONS = ["celery", "django", "dramatiq", "web"]
FRAMEWORKS = ["celery", "django", "dramatiq", "rq", "kombu", "prometheus_client"]


def test_import_mistri_locks_imports_no_integration_and_no_framework() -> None:
    script = (
        "import json, sys, mistri_locks, mistri_locks.metrics\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('mistri_locks.integrations')"
        f" or m.split('.')[0] in {FRAMEWORKS!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True).stdout
    assert json.loads(out) == []


def test_the_binding_modules_import_no_integration() -> None:
    binding = [p for p in PACKAGE.rglob("*.py") if "integrations" not in p.relative_to(PACKAGE).parts]
    assert PACKAGE / "_leased.py" in binding
    wired = []
    for path in binding:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [a.name for a in node.names]
            if any("integrations" in n.split(".") or n.split(".")[0] in FRAMEWORKS[:5] for n in names):
                wired.append(f"{path}:{node.lineno}")
    assert wired == [], "the binding must not import its integrations or a framework"


def test_each_integration_is_under_integrations_and_the_old_paths_are_gone() -> None:
    for name in INTEGRATIONS:
        assert importlib.util.find_spec(f"mistri_locks.integrations.{name}") is not None, name
        assert importlib.util.find_spec(f"mistri_locks.{name}") is None, name
