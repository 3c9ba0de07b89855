"""Record which tests of torch's DistributedTest gloo passes on the installed torch.

    python tests/torch_suite/record_gloo.py

writes ``gloo/<torch version>-ws<N>.txt`` for each world size of
test_torch_suite.py, which then compares asyncoll's run with it instead of
running the suite on gloo each time (half of CI's time for this suite).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from test_torch_suite import HERE, WORLD_SIZES, run_suites, torch_version  # noqa: E402


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        runs = run_suites("gloo", WORLD_SIZES, Path(tmp))
    for world_size, results in runs.items():
        passed = sorted(name for name, (outcome, _) in results.items() if outcome == "passed")
        target = HERE / "gloo" / f"{torch_version()}-ws{world_size}.txt"
        target.parent.mkdir(exist_ok=True)
        target.write_text(f"# tests of torch {torch_version()}'s DistributedTest that gloo "
                          f"passes at world size {world_size} ({len(passed)} of "
                          f"{len(results)}; record_gloo.py)\n" + "\n".join(passed) + "\n")
        print(f"{target}: {len(passed)} passed of {len(results)}", flush=True)


if __name__ == "__main__":
    main()
