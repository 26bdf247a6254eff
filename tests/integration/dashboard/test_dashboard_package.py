"""The dashboard as installed: without its extra the rest of Sediment works while the command
says what to install. (Its templates and static files ship in the wheel:
tests/project/test_packaging.py checks them in the one wheel the suite builds.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HINT = "pip install 'sediment-lsm[dashboard]'"

_NO_WEB_STACK = '''
import sys


class _NoWebStack:
    """Refuses the dashboard extra's modules, as if they were not installed."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("starlette", "uvicorn"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoWebStack())
'''


@pytest.mark.slow  # builds a venv without the extra: the full lane
def test_without_the_extra_the_command_says_what_to_install(tmp_path: Path,
                                                             dash_store: str) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_NO_WEB_STACK)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEDIMENT_")}
    env["PYTHONPATH"] = str(site)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, *args], env=env, capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)

    assert run("-c", "import starlette").returncode != 0
    out = run("-c", "import sys, sediment, sediment.cli.app; "
                    "print(sorted({m.split('.')[0] for m in sys.modules} & "
                    "{'starlette', 'uvicorn', 'jinja2', 'plotly'}))")
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr
    listed = run("-m", "sediment.cli", "tables", "--store", dash_store)
    assert listed.returncode == 0 and "events" in listed.stdout, listed.stderr
    done = run("-m", "sediment.cli", "dashboard", "--store", dash_store)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("error: the dashboard needs starlette, uvicorn")
    assert HINT in done.stderr
