"""The library without ALSA (issue 22): libasound is opened on first use, not linked, so a
machine or a wheel install without it still transcribes files, pipes and pushed audio, and a
microphone fails with an error naming the package. ALSA is hidden for real: in a private mount
namespace (unshare, as root) /dev/null is bind-mounted over the system's libasound.so.2."""
import glob
import os
import subprocess

from speechtools import DEMO, final_segments

LIBASOUND = sorted(glob.glob("/usr/lib/*-linux-gnu/libasound.so.2.*") + glob.glob("/usr/lib/libasound.so.2.*"))


def without_alsa(*command):
    assert LIBASOUND, "libasound2 is part of the test set-up (the ALSA tests use it)"
    script = f'mount --bind /dev/null "{LIBASOUND[0]}" && exec "$@"'
    return subprocess.run(["unshare", "--mount", "sh", "-c", script, "sh", *map(str, command)],
                          capture_output=True, text=True, timeout=60)


def test_the_library_does_not_link_alsa():
    lib = DEMO.parent / "libspeechclient.so.0"
    needed = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True, check=True).stdout
    assert "libasound" not in needed


def test_a_file_is_transcribed_without_alsa(server, speech, tmp_path):
    wav = speech("turn on the kitchen lights")
    r = without_alsa(DEMO, "--url", server.url, "--app-id", "noalsa", "--file", wav, "--json",
                     "--cache-dir", tmp_path / "c")
    assert r.returncode == 0, r.stderr
    _, finals = final_segments(r.stdout)
    assert [f["transcript"] for f in finals] == ["turn on the kitchen lights"]


def test_a_microphone_without_alsa_names_the_package(server, tmp_path):
    r = without_alsa(DEMO, "--url", server.url, "--app-id", "noalsa", "--mic", "default",
                     "--cache-dir", tmp_path / "c")
    assert r.returncode == 1
    assert "ALSA device 'default': ALSA is not installed" in r.stderr, r.stderr
    assert "install the libasound2 package" in r.stderr
    r = without_alsa(DEMO, "--list-devices")
    assert r.returncode == 1 and "libasound2" in r.stderr, r.stderr
