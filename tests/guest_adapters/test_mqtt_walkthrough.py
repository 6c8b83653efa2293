"""The guide's MQTT walk-through, run as written: it starts its own broker and its own demo
daemon, assumes nothing is running, and collides with nothing the README starts.

The commands are read from ``guest_adapters/README.md`` and run one by one, background jobs
left running as a shell leaves them. Substituted: the broker's and the daemon's ports (free
ones, so tests can run side by side) and ``$HOME``. Between the commands the test waits only
for what a reader waits for by reading: the subscriber being connected before the request.
The guide's tritonclient lines, its demo requests and the README's "Try it" then run
against the walk-through's daemon (their 8080 replaced by its port), and
``docs/mqtt-topics.md``'s "Try it" against its broker.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.fixtures.cache import cache_dir
from tests.fixtures.doc_shell import DocShell, commands, is_background, sh_block
from tests.fixtures.net import free_port
from wasmgate.guest_adapters.build import package_root
from wasmgate.guest_adapters.examples import models_dir

GUIDE = package_root() / "README.md"
REPO = Path(__file__).resolve().parents[2]
TOPICS = REPO / "docs" / "mqtt-topics.md"
HEADING = "### MQTT, with a broker of its own"
BROKER_PORT, HTTP_PORT = "18830", "8081"


def _walkthrough() -> list[str]:
    return commands(sh_block(GUIDE, HEADING))


def test_the_walkthrough_owns_its_broker_port_and_data() -> None:
    """Nothing is assumed running, and nothing collides with the README's daemon (HTTP on
    8080, the default data directory) or a system broker on 1883."""
    text = "\n".join(_walkthrough())
    assert re.search(rf"^mosquitto -p {BROKER_PORT} &", text, re.MULTILINE)
    assert f"port = {HTTP_PORT}" in text
    assert "8080" not in text.replace("keeps 8080", "")
    assert "data_dir = " in text
    assert not re.search(r"\b1883\b", text)
    for line in text.splitlines():
        if line.startswith("mosquitto_"):
            assert f"-p {BROKER_PORT}" in line, line


def _ported(command: str, broker: int, http: int) -> str:
    command = re.sub(rf"\b{BROKER_PORT}\b", str(broker), command)
    return re.sub(rf"\b{HTTP_PORT}\b", str(http), command)


def _env(home: Path) -> dict[str, str]:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("WASMGATE_")}
    return {
        **env,
        "PATH": path,  # `wasmgate` as the reader's shell finds it
        "HOME": str(home),
        "WASMGATE_BUILD_CACHE": str(cache_dir("adapters")),  # the demo's builds, cached
    }


@pytest.mark.timeout(600)
def test_mqtt_walkthrough_as_written(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    broker, http = free_port(), free_port()
    shell = DocShell(work, _env(home))
    try:
        for command in _walkthrough():
            shell.run(_ported(command, broker, http))
            if is_background(command) and command.startswith("mosquitto_sub"):
                _until_subscribed(shell, broker, "demo/answers")
        shell.wait_for("wasmgate/v1/gw1/events/vibration-anomaly {")
        shell.wait_for('demo/answers {"device":"pump-03"')
        assert '"anomaly":true' in shell.text()
        _tritonclient_lines(http)
        _topics_try_it(shell, broker)
        _http_examples(shell, http)
    finally:
        shell.close()
    text = shell.text()
    assert "Traceback" not in text, text[text.find("Traceback") - 1500 :][:4000]


def _until_subscribed(shell: DocShell, broker: int, topic: str) -> None:
    """The subscriber's SUBSCRIBE has reached the broker once a probe comes back through it
    (a reader starts the request seconds later; a script a few milliseconds later)."""
    for n in range(200):
        probe = ["mosquitto_pub", "-p", str(broker), "-t", topic, "-m", f"probe-{n}"]
        subprocess.run(probe, check=True, timeout=10)
        if shell.shows(f"{topic} probe-{n}", timeout=0.25):
            return
    raise AssertionError(f"the subscriber never subscribed:\n{shell.text()[-3000:]}")


def _tritonclient_lines(http: int) -> None:
    """The guide's five tritonclient lines against the walk-through's daemon."""
    text = GUIDE.read_text(encoding="utf-8").split("### tritonclient in five lines", 1)[1]
    block = re.search(r"```python\n(.*?)```", text, re.DOTALL)
    assert block is not None
    code = block.group(1).replace("127.0.0.1:8080", f"127.0.0.1:{http}")
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    with np.load(models_dir() / "digits-test.npz") as test_set:
        assert done.stdout.strip() == str(test_set["y"][0]), done.stdout


def _topics_try_it(shell: DocShell, broker: int) -> None:
    """docs/mqtt-topics.md's "Try it", with the walk-through's broker and daemon running
    (and its subscriber, which shows the answer on demo/answers)."""
    for command in commands(sh_block(TOPICS, "## Try it")):
        shell.run(_ported(command, broker, 0))
        if is_background(command):
            _until_subscribed(shell, broker, "wasmgate/v1/gw1/probe")
    shell.wait_for("wasmgate/v1/gw1/adapters/digits/req")
    shell.wait_for('demo/answers {"digit":0')


def _http_examples(shell: DocShell, http: int) -> None:
    """The guide's demo requests and the README's "Try it", against the demo daemon."""
    guide = GUIDE.read_text(encoding="utf-8").split("## Try the demo first", 1)[1]
    requests = re.findall(r"```sh\n(.*?)```", guide.split("### MQTT", 1)[0], re.DOTALL)[1]
    readme = sh_block(REPO / "README.md", "## Try it")
    for block in (requests, readme):
        for command in commands(block):
            shell.run(command.replace("127.0.0.1:8080", f"127.0.0.1:{http}"), timeout=60)
    text = shell.text()
    assert text.count('{"digit":0') >= 3, text[-3000:]  # zero.json: mqtt-topics, guide, README
    assert '"outputs"' in text
    assert re.search(r"^wasmgate_requests_total\{", text, re.MULTILINE), text[-3000:]
