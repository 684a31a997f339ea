"""valgrind memcheck of the C demo transcribing a file through the reference server (issue 9):
no invalid access, nothing definitely or indirectly lost."""
import re
import shutil
import subprocess

import pytest

from speechtools import DEMO, final_segments


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed (scripts/setup-debian.sh installs it)")
def test_demo_under_valgrind_has_no_errors_and_no_leaks(server, speech, tmp_path):
    out = subprocess.run(["valgrind", "--leak-check=full", "--show-leak-kinds=definite,indirect",
                          "--errors-for-leak-kinds=definite,indirect", "--error-exitcode=99",
                          str(DEMO), "--url", server.url, "--app-id", "e2e", "--file",
                          str(speech("turn on the kitchen lights")), "--cache-dir", str(tmp_path), "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    assert final_segments(out.stdout)[1][-1]["transcript"] == "turn on the kitchen lights"
    summary = re.search(r"ERROR SUMMARY: (\d+) errors", out.stderr)
    assert summary and summary.group(1) == "0", out.stderr[-4000:]
    for kind in ("definitely lost", "indirectly lost"):
        m = re.search(kind + r": ([\d,]+) bytes", out.stderr)
        # No leak summary at all means valgrind found no allocation left: also fine.
        assert m is None or m.group(1) == "0", out.stderr[-4000:]
    reachable = re.search(r"still reachable: ([\d,]+) bytes", out.stderr)
    print("figure: valgrind memcheck of the demo:", reachable.group(0) if reachable else "no blocks in use at exit")
