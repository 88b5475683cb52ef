"""The runnable example works and the compose file runs a real p2 command."""

import shlex
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_example_runs():
    result = subprocess.run([sys.executable, "examples/synthesize.py"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "best placement" in result.stdout


def test_compose_planner_service_runs_a_valid_command():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    planner = compose["services"]["planner"]
    assert (ROOT / planner["build"]["dockerfile"]).is_file()
    dockerfile = (ROOT / planner["build"]["dockerfile"]).read_text()
    assert 'ENTRYPOINT ["p2"]' in dockerfile
    result = subprocess.run([sys.executable, "-m", "optimizer_service.cli", *planner["command"]], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{shlex.join(planner['command'])}: {result.stderr}"
