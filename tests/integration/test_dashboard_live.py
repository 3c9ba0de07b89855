"""The dashboard of a real coordinator daemon in headless Chromium, while a job runs (issue 43).

``asyncoll-coordinator --http-port`` with a token serves a 3-rank job whose
rank 2 skipped an all_reduce that ranks 0 and 1 wait in: the page shows the
job and its three members, and its hang view names rank 2 in the words of
``asyncoll status``. A request without the token is refused. The screenshot
goes to ASYNCOLL_DASHBOARD_SCREENSHOT when it is set (CI keeps it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from .conftest import WORKERS, Daemon
from .test_dashboard_page import chromium, needs_chromium, open_page

pytestmark = pytest.mark.timeout(150)
TOKEN = "live-s3cret"


def api(port: int, path: str) -> Any:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                     headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.loads(reply.read())


@needs_chromium
def test_the_page_shows_a_running_job_and_names_its_hung_rank(tmp_path: Path) -> None:
    (tmp_path / "token").write_text(TOKEN)
    daemon = Daemon(tmp_path, "--token-file", str(tmp_path / "token"), "--http-port", "0",
                    "--http-port-file", str(tmp_path / "http.port"))
    port = int((tmp_path / "http.port").read_text())
    env = dict(os.environ, ASYNCOLL_TOKEN=TOKEN, ASYNCOLL_HEARTBEAT_TIMEOUT="2")
    procs = [subprocess.Popen([sys.executable, str(WORKERS / "straggler.py"), daemon.address,
                               "3", str(rank), "live", "skip:2", "20"], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for rank in range(3)]
    try:
        assert procs[2].stdout is not None and procs[2].stdout.readline().strip() == "DONE"
        deadline = time.monotonic() + 40
        while not api(port, "/api/jobs/live")["stuck"]:
            assert time.monotonic() < deadline, "the coordinator never saw rank 2 hang"
            time.sleep(0.3)
        page = f"http://127.0.0.1:{port}/?token={TOKEN}#job=live"
        dom = open_page(page)
        assert "live" in dom.values("data-job")
        assert sorted(dom.values("data-rank")) == ["0", "1", "2"]
        hang = dom.text("hang")
        assert "rank 2 is at all_reduce #" in hang and "ranks 0, 1 wait in #" in hang, hang
        shot = Path(os.environ.get("ASYNCOLL_DASHBOARD_SCREENSHOT") or tmp_path / "live.png")
        chromium(f"--screenshot={shot}", "--window-size=1280,900", page)
        assert shot.read_bytes().startswith(b"\x89PNG")
        with pytest.raises(urllib.error.HTTPError, match="401"):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/jobs", timeout=10)
    finally:
        for proc in procs:
            proc.kill()
            proc.communicate(timeout=30)
        daemon.stop()
