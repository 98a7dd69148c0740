"""The scripts in examples/ run and give sensible output (small sizes)."""

import pathlib
import subprocess
import sys

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def _run(script, *args):
    res = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_learning_curve_example():
    out = _run("learning_curve.py", "--n-samples", "500", "--n-splits", "2", "--n-starts", "1",
               "--max-iter", "40")
    rows = [line.split() for line in out.splitlines()[1:5]]
    sizes = [int(r[0]) for r in rows]
    assert sizes == sorted(sizes) and len(set(sizes)) == 4
    assert all(float(r[1]) >= 0 for r in rows)
    assert "power law: loss ~" in out


def test_choose_k_example():
    out = _run("choose_k.py", "--n-samples", "400", "--n-splits", "2", "--n-starts", "1",
               "--max-iter", "40")
    assert [line.split()[0] for line in out.splitlines()[1:5]] == ["1", "2", "3", "4"]
    assert "chosen K = " in out and "true K* = 2" in out


def test_choose_k_rule():
    sys.path.insert(0, str(EXAMPLES))
    try:
        from choose_k import smallest_within_one_se
    finally:
        sys.path.pop(0)
    res = {"param_n_experts": [1, 2, 3], "mean_test_r2": [0.5, 0.95, 0.96],
           "std_test_r2": [0.01, 0.02, 0.04], "split0_test_r2": [0] * 3,
           "split1_test_r2": [0] * 3, "split2_test_r2": [0] * 3, "split3_test_r2": [0] * 3}
    # best 0.96, SE = 0.04 / 2 = 0.02 -> K = 2 (0.95) is within one SE
    assert smallest_within_one_se(res) == 1
