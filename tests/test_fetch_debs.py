"""scripts/fetch_debs.sh reads the machine's apt sources, deb822 (*.sources) and one-line
(sources.list, *.list), Debian and Ubuntu, into its private sources list: checked with made-up
apt folders (FETCH_DEBS_APT_ETC) and --sources, which prints the list and fetches nothing."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "fetch_debs.sh"
KEY = "/usr/share/keyrings/debian-archive-keyring.gpg"


def sources_of(tmp_path: Path, files: dict) -> list[str]:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    env = {**os.environ, "FETCH_DEBS_APT_ETC": str(tmp_path)}
    env.pop("FETCH_DEBS_SOURCES", None)
    out = subprocess.run(["bash", SCRIPT, "--sources"], env=env, capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def key_opt() -> str:
    return f"[signed-by={KEY}] " if os.path.exists(KEY) else ""


def test_debian_deb822(tmp_path):
    got = sources_of(tmp_path, {"sources.list.d/debian.sources": f"""Types: deb
# a comment
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: {KEY}

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
"""})
    assert got == [f"deb {key_opt()}http://mirror.example/debian sid main",
                   f"deb {key_opt()}http://mirror.example/debian experimental main"]


def test_ubuntu_deb822(tmp_path):
    got = sources_of(tmp_path, {"sources.list.d/ubuntu.sources": """Types: deb
URIs: http://archive.example/ubuntu/
Suites: noble noble-updates
Components: main restricted universe
Signed-By: /nonexistent/keyring.gpg

Types: deb-src
URIs: http://archive.example/ubuntu/
Suites: noble
Components: main

Enabled: no
Types: deb
URIs: http://disabled.example/ubuntu/
Suites: noble
Components: main
"""})
    # A keyring that is not there is dropped: apt then checks with its default trusted keys.
    assert got == ["deb http://archive.example/ubuntu/ noble noble-updates main universe"]


def test_ubuntu_one_line(tmp_path):
    got = sources_of(tmp_path, {"sources.list": f"""# jammy
deb http://archive.example/ubuntu jammy main restricted
deb [arch=amd64 signed-by={KEY}] http://archive.example/ubuntu jammy-updates main
deb-src http://archive.example/ubuntu jammy main
"""})
    assert got == ["deb http://archive.example/ubuntu jammy main universe",
                   f"deb {key_opt()}http://archive.example/ubuntu jammy-updates main universe"]


def test_no_usable_source(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "other.list").write_text("deb http://vendor.example/apt stable main\n")
    env = {**os.environ, "FETCH_DEBS_APT_ETC": str(tmp_path), "FETCH_DEBS_DEST": str(tmp_path / "dest")}
    env.pop("FETCH_DEBS_SOURCES", None)
    out = subprocess.run(["bash", SCRIPT, "headers"], env=env, capture_output=True, text=True)
    assert out.returncode != 0 and "ORT_INCLUDE_DIR" in out.stderr, out.stderr


def test_make_fetches_headers_only_without_ort_include_dir():
    """`make -n -B` lists every command the build could run: the headers' fetch is among them only
    when ORT_INCLUDE_DIR is not given."""
    root = SCRIPT.parent.parent

    def dry_run(*args):
        return subprocess.run(["make", "-n", "-B", "-C", str(root), "build/.configured", *args],
                              capture_output=True, text=True, check=True).stdout
    assert "fetch_debs.sh headers" in dry_run()
    out = dry_run("ORT_INCLUDE_DIR=/opt/ort/include")
    assert "fetch_debs.sh" not in out and '-DORT_INCLUDE_DIR="/opt/ort/include"' in out, out
