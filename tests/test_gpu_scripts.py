"""scripts/gpu_check.sh's listing of carried packs (pack_parts), run here as the GPU machine runs
it (bash, set -euo pipefail): a pack that was not carried lists nothing instead of stopping the
script (a device call was lost to that), and parts spread over several folders come back in part
order, ready to concatenate."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pack_parts(wheels: str, name: str) -> subprocess.CompletedProcess:
    with open(os.path.join(ROOT, "scripts", "gpu_check.sh")) as f:
        text = f.read()
    start = text.index("pack_parts() {")
    body = text[start:text.index("\n}\n", start) + 3]
    script = f"set -euo pipefail\nwheels={wheels}\n{body}\nparts=$(pack_parts {name})\necho \"[$parts]\"\n"
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True)


def test_absent_pack_lists_nothing(tmp_path):
    (tmp_path / "mlxsite.tar.xz.part.00").write_bytes(b"x")
    run = pack_parts(str(tmp_path), "ortgpu")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


def test_parts_across_folders_in_order(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    for folder, part in ((b, "00"), (a, "02"), (b, "01")):
        (folder / f"ortgpu.tar.xz.part.{part}").write_bytes(b"x")
    run = pack_parts(f"{a}:{b}", "ortgpu")
    assert run.returncode == 0, run.stderr
    listed = run.stdout.strip()[1:-1].split("\n")
    assert [os.path.basename(p)[-2:] for p in listed] == ["00", "01", "02"]
    assert listed[0].startswith(str(b)) and listed[2].startswith(str(a))


def test_ptx_cache_round_trip(tmp_path):
    """save_ptx_cache (scripts/gpu_common.sh) hands the cache back as parts that gpu_check.sh's
    loading (cat the parts, xz -d, tar x) restores; a second save replaces the first's parts."""
    cache, out, back = tmp_path / "ptx", tmp_path / "out", tmp_path / "back"
    for d in (cache, out, back):
        d.mkdir()
    (cache / "kernel.cubin").write_bytes(os.urandom(4096))
    (cache / "ort_ep_mlx_norm.cubin").write_bytes(os.urandom(512))  # the EP's own, first in the archive
    (out / "ptxcache.tar.xz.part.07").write_bytes(b"stale")
    script = (f"set -euo pipefail\n. {ROOT}/scripts/gpu_common.sh\nOUT={out}\nsave_ptx_cache {cache}\n"
              f"cat {out}/ptxcache.tar.xz.part.* | xz -d | tar x -C {back}\n")
    run = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert sorted(p.name for p in out.iterdir()) == ["ptxcache.tar.xz.part.00"]
    for name in ("kernel.cubin", "ort_ep_mlx_norm.cubin"):
        assert (back / name).read_bytes() == (cache / name).read_bytes()


def test_suite_chunks_cover_the_suite_once():
    """suite_chunk I/N over I = 0..N-1 lists every test file exactly once."""
    script = f"set -euo pipefail\ncd {ROOT}\n. scripts/gpu_common.sh\nfor i in 0 1 2; do suite_chunk $i/3; done\n"
    run = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    listed = run.stdout.split()
    every = subprocess.run(["bash", "-c", f"cd {ROOT} && ls tests/test_*.py tests/*/test_*.py"], capture_output=True,
                           text=True).stdout.split()
    assert sorted(listed) == sorted(every) and len(every) > 30
