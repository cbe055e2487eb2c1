"""Differential fuzzing (tools/fuzz/): a fixed seeded slice of random graphs run with ORT's CPU EP
and with the EP in strict mode (eager, trace, replay), each in a worker process so that a crash
fails the test instead of killing pytest; and the saved regression cases (tests/fuzz/cases/*.json,
minimised failures written by `tools/fuzz/run.py --save`; a case with an "explained" field pins an
explained difference, which must keep that explanation). A crash, a hang, an error on one side
only or a mismatch without a known cause (run.explain) fails. docs/RELIABILITY.md has the counts
of the long runs."""
from __future__ import annotations

import glob
import json
import importlib.util
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "fuzz"))
_spec = importlib.util.spec_from_file_location("fuzz_run", os.path.join(ROOT, "tools", "fuzz", "run.py"))
fuzz = importlib.util.module_from_spec(_spec)  # by path: bench/run.py is another module named `run`
_spec.loader.exec_module(fuzz)

# (pool, first seed, count, the fewest graphs both sides must answer): core, the ops of gen.py; data
# (gen_data.py), ops reading indices and sizes from tensors, each Run replayed on other (often
# hostile) values; attrs (gen_attrs.py), a hostile model file, attributes at the edges of int64, which
# ORT and the EP mostly both refuse
SLICES = [("core", 100_000, 200, 100), ("data", 200_000, 150, 75), ("attrs", 300_000, 60, 1)]
CASES = sorted(glob.glob(os.path.join(ROOT, "tests", "fuzz", "cases", "*.json")))


@pytest.mark.parametrize("pool,seed,count,min_ok", SLICES, ids=[s[0] for s in SLICES])
def test_fuzz_slice(pool, seed, count, min_ok):
    counts, failures = fuzz.run(range(seed, seed + count), jobs=1, timeout=120, pool=pool)
    bad = [f"seed {s}: {r['class']}: {mr.get('detail', '')[:300]}\n  minimised: {json.dumps(m['nodes'])}"
           for s, r, m, mr, why in failures if not why]
    assert not bad, f"{len(bad)} unexplained failures ({dict(counts)}); reproduce with " \
                    f"tools/fuzz/run.py --pool {pool} --seed S --count 1 --save:\n" + "\n".join(bad)
    assert counts["ok"] >= min_ok, dict(counts)


def _case_params():
    for path in CASES:
        case = json.load(open(path))
        marks = [pytest.mark.xfail(strict=True, reason=case["xfail"])] if case.get("xfail") else []
        yield pytest.param(case, id=os.path.basename(path)[:-5], marks=marks)


@pytest.fixture(scope="module")
def worker():
    w = fuzz.Worker(timeout=120)
    yield w
    w.stop()


@pytest.mark.parametrize("case", list(_case_params()))
def test_fuzz_case(case, worker):
    res = worker.call({"spec": case["spec"]})
    why = fuzz.explain(case["spec"], res)
    if res["class"] in ("ok", "both-error", "declined", "no-ref"):
        return
    assert why, f"{res['class']}: {res.get('detail', '')} (found as {case['found']}: {case['detail'][:200]})"
    # a case saved with its explanation (an explained difference pinned) must keep that explanation:
    # another cause, even a known one, is a change to look at
    if case.get("explained"):
        assert why[:40] == case["explained"][:40], f"explained as {why!r}, saved as {case['explained']!r}"


def test_worker_caps_its_data_segment(worker):
    """The fuzz worker (which runs the EP and, outside the sanitizer, ORT's reference) caps its data
    segment, so the pools' sizes past memory (2^40 elements) are refused at once on a host that
    overcommits memory too: there they were paged in until the OOM killer or the timeout ended the
    worker (the GPU suite's stall of 2026-12-06)."""
    if "libasan" in os.environ.get("LD_PRELOAD", ""):
        pytest.skip("under the sanitizer ORT's reference runs in a capped child instead")
    worker.call({"seed": 100_000, "pool": "core"})  # started, past its setup
    limits = open(f"/proc/{worker.proc.pid}/limits").read()
    line = next(ln for ln in limits.splitlines() if ln.startswith("Max data size"))
    soft = line.split()[3]
    phys = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert soft != "unlimited" and int(soft) <= min(16 << 30, phys // 4), line
