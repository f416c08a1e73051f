"""Run ``gpumemlab plan --json`` on a fixture script in a fresh process, as a user would, for the
planner's tests: the completed process and the JSON result it printed."""
import json
import os
import subprocess
import sys

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(TESTS, "fixtures", "planner")


def plan_fixture(name: str, *args: str, timeout: int = 300):
    """Plan ``tests/fixtures/planner/<name>`` with ``args``; returns ``(run, result, script)``."""
    env = dict(os.environ, PYTHONPATH=os.path.dirname(TESTS))
    script = os.path.join(FIXTURES, name)
    run = subprocess.run([sys.executable, "-m", "gpumemlab.cli", "plan", "--json", script, *args],
                         env=env, capture_output=True, text=True, timeout=timeout)
    return run, json.loads(run.stdout[run.stdout.index("{"):]), script
