"""Smoke test of ``benchmarks/bench_layer.py`` (no timing assertions): its tiny configuration
runs in a subprocess (the PyTorch method only where torch is installed), and the PyTorch loss it
minimises is the layer fit's own objective, with autograd's gradient equal to the analytic one
of the layer kernel."""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "benchmarks")
HAS_TORCH = importlib.util.find_spec("torch") is not None


def test_bench_layer_quick_runs(tmp_path):
    out = tmp_path / "layer.json"
    cmd = [sys.executable, os.path.join(BENCH, "bench_layer.py"), "--quick", "--no-wait",
           "--no-warm-up", "--threads", "1", "--json", str(out)]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "CPU:" in res.stdout and "σ²/m vs truth" in res.stdout, res.stdout
    data = json.loads(out.read_text())
    (rec,) = data["records"]
    methods = {"estimator", "torch"} if HAS_TORCH else {"estimator"}
    assert set(rec["methods"]) == methods
    assert (rec["H"], rec["N"], rec["d"], rec["gate"], rec["m"]) == (1, 2, 2, "none", 1200)
    for r in rec["methods"].values():
        assert np.isfinite(r["objective"]) and r["wall"] > 0
        assert r["failure"] == (r["excess_sigma2_over_m"] > data["cert_tol"])
    est = rec["methods"]["estimator"]
    assert est["objective"] == pytest.approx(est["objective_of_predict"], rel=1e-9)
    if HAS_TORCH:
        assert "sigmoid(u)" in res.stdout and "torch/est time" in res.stdout, res.stdout
        assert rec["methods"]["torch"]["n_starts"] == 4
        assert data["summary"][-1]["ratio_torch_over_estimator"] > 0
    else:
        assert "torch" in data["unavailable"]


@pytest.mark.parametrize("gate", ["none", "value", "sdpa"])
def test_torch_loss_is_the_layer_objective(gate):
    torch = pytest.importorskip("torch")
    sys.path.insert(0, BENCH)
    try:
        import bench_layer
    finally:
        sys.path.remove(BENCH)
    from hmoe_estim.layer import make_attention_regression, random_attention_layer

    truth = random_attention_layer(2, 4, 2, random_state=0)
    X, Y = make_attention_regression(40, truth, n_tokens=3, gate=gate, noise=0.1,
                                     random_state=1)
    starts, lower, upper, layout = bench_layer.estimator_starts(X, Y, 2, 2, gate, "sigmoid",
                                                                2, seed=3)
    assert len(starts) == 2 and np.all(starts[0] >= lower) and np.all(starts[0] <= upper)
    from hmoe_estim.layer import LayerProblem

    problem = LayerProblem(X, Y, layout, gate, "sigmoid", lower, upper)
    loss = bench_layer.torch_loss(X, Y, layout, gate, "sigmoid")
    theta = torch.from_numpy(starts[1]).requires_grad_(True)
    value = loss(theta)
    value.backward()
    obj, grad = problem.objective_and_gradient(starts[1])
    assert float(value.detach()) == pytest.approx(obj, rel=1e-12)
    np.testing.assert_allclose(theta.grad.numpy(), grad, rtol=1e-9,
                               atol=1e-12 * max(1.0, np.abs(grad).max()))
