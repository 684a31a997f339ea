"""valgrind memcheck of the C demo transcribing a file through the reference server (issue 9):
no invalid access, nothing definitely or indirectly lost."""
import os
import re
import shutil
import subprocess

import pytest

from speechtools import DEMO, final_segments

ROOT = DEMO.parents[1]


@pytest.fixture(autouse=True)
def valgrind():
    """A missing valgrind fails these tests (the set-up installs it); it never skips them."""
    assert shutil.which("valgrind"), "valgrind is not installed: scripts/setup-debian.sh installs it"


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


def header_example():
    """The minimal program of include/speechclient.h's OVERVIEW, as written there."""
    text = (ROOT / "include" / "speechclient.h").read_text()
    block = text.split("** A minimal program", 1)[1].split("** CONVENTIONS", 1)[0]
    lines = [ln[3:] if ln.startswith("** ") else ln[2:] for ln in block.splitlines()[1:] if ln.startswith("**")]
    code = "\n".join(ln[4:] if ln.startswith("    ") else ln for ln in lines)
    return code.split("\n(Tests/e2e", 1)[0]


def test_the_header_example_compiles_strictly_and_runs_clean_under_valgrind(server, speech, tmp_path):
    """Issue 19 item 6: the header's own example did not compile with -Wall -Wextra -Werror, and
    leaked the options on its error path."""
    code = header_example().replace("grpc://127.0.0.1:50051", server.url)
    (tmp_path / "example.c").write_text(code)
    lib = ROOT / "build"
    cc = subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", f"-I{ROOT / 'include'}",
                         "example.c", f"-L{lib}", "-lspeechclient", f"-Wl,-rpath,{lib}", "-o", "example"],
                        cwd=tmp_path, capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr + "\n" + code
    (tmp_path / "speech.wav").symlink_to(speech("turn on the kitchen lights"))
    env = dict(os.environ, HOME=str(tmp_path))
    for expect_ok in (True, False):
        if not expect_ok:
            (tmp_path / "speech.wav").unlink()  # the error path: spc_client_new fails
        out = subprocess.run(["valgrind", "--leak-check=full", "--show-leak-kinds=definite,indirect",
                              "--errors-for-leak-kinds=definite,indirect", "--error-exitcode=99", "./example"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
        if expect_ok:
            assert out.returncode == 0, out.stderr[-4000:]
            assert out.stdout.strip().splitlines()[-1] == "turn on the kitchen lights", out.stdout
        else:
            assert out.returncode == 1, out.stderr[-4000:]
            assert "speech.wav" in out.stderr
