"""The C program (register, session, Run, release, unregister) under valgrind: no memory the EP
allocates may be lost. Skipped where valgrind is missing. The second test adds models whose rows
have a prepare stage (tree ensembles, SVMs, LabelEncoder, MatMulNBits with constant weights): their
plans' prepared states must be released with the plans."""
import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_leak_checked(*models):
    exe = os.path.join(ROOT, "build", "test_c_api")
    lib = os.path.join(ROOT, "build", "libonnxruntime_ep_mlx.so")
    model = os.path.join(ROOT, "tests", "data", "add_relu.onnx")
    p = subprocess.run(["valgrind", "--leak-check=full", "--show-leak-kinds=definite,indirect", exe, lib, model,
                        *models], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr[-4000:]
    assert "test_c_api: OK" in p.stdout
    lost = {k: int(v.replace(",", "")) for k, v in re.findall(r"(definitely|indirectly) lost: ([\d,]+) bytes", p.stderr)}
    assert lost == {"definitely": 0, "indirectly": 0}, p.stderr[-4000:]


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind not installed")
def test_c_program_leaks_nothing():
    run_leak_checked()


def prepared_models(tmp_path):
    """Models whose nodes have prepared states: every kind of tree table, both SVMs in their kernel and
    liblinear forms (with probabilities), LabelEncoder with float and int64 keys, and MatMulNBits."""
    import numpy as np
    from ml_parity import F, I64, ml_model
    from test_ops_contrib_quant import nbits_model
    from test_ops_ml_svm import kernel_attrs, svc_attrs
    from test_ops_ml_trees import ALL_MODES, random_tree, v3_attrs, v5_attrs

    rng = np.random.default_rng(0)
    x = np.zeros((4, 3), np.float32)
    member = [random_tree(rng, 3, 3, 2, ALL_MODES + ["BRANCH_MEMBER"], 1, missing=True) for _ in range(3)]
    member = [t for t in member if t[0] == "node"]
    single = [random_tree(rng, 3, 3, 1, ALL_MODES, 1, missing=True) for _ in range(2)]
    classes = [random_tree(rng, 3, 3, 3, ALL_MODES, 0, missing=False) for _ in range(3)]
    models = {
        "tree_v5": ml_model("TreeEnsemble", {**v5_attrs(member, np.float32), "n_targets": 2, "aggregate_function": 1,
                                             "post_transform": 0}, {"x": x}, [("y", F)], opset=5),
        "tree_regressor": ml_model("TreeEnsembleRegressor", {**v3_attrs(single, False), "n_targets": 1,
                                                             "base_values": [0.5]}, {"x": x}, [("y", F)], opset=3),
        "tree_classifier": ml_model("TreeEnsembleClassifier", {**v3_attrs(classes, True), "base_values": [0.1, 0.2, 0.3],
                                                               "classlabels_int64s": [1, 2, 3]},
                                    {"x": x}, [("y", I64), ("z", F)]),
        "svm_regressor": ml_model("SVMRegressor", {**kernel_attrs("RBF"), "n_supports": 2, "rho": [0.25],
                                                   "support_vectors": [0.1, 0.2, 0.3, -0.1, 0.5, 0.0],
                                                   "coefficients": [0.5, -1.0]}, {"x": x}, [("y", F)]),
        "svm_regressor_linear": ml_model("SVMRegressor", {**kernel_attrs("LINEAR"), "coefficients": [0.5, -1.0, 2.0],
                                                          "rho": [0.1]}, {"x": x}, [("y", F)]),
        "svm_classifier": ml_model("SVMClassifier", svc_attrs(3, [2, 1, 2], 3, "POLY", "NONE", True, seed=1),
                                   {"x": x}, [("y", I64), ("z", F)]),
        "svm_classifier_linear": ml_model("SVMClassifier", {"coefficients": [0.5, 1.0, 0.25, 0.1, 0.2, 0.3],
                                                            "rho": [-0.4], "classlabels_ints": [0, 1],
                                                            "kernel_params": [0.0, 0.0, 0.0]},
                                          {"x": x}, [("y", I64), ("z", F)]),
        "label_encoder": ml_model("LabelEncoder", {"keys_floats": [0.5, float("nan"), 2.0, 0.5],
                                                   "values_int64s": [3, 4, 5, 6]}, {"x": x}, [("y", I64)], opset=4),
        "label_encoder_ints": ml_model("LabelEncoder", {"keys_int64s": [1, 5, 0], "values_floats": [0.5, 1.5, 2.5]},
                                       {"x": np.zeros((4, 3), np.int64)}, [("y", F)], opset=2),
        "matmul_nbits": nbits_model(64, 8, 4, 32, zp="u8")[0],
    }
    paths = []
    for name, model in models.items():
        path = tmp_path / f"{name}.onnx"
        path.write_bytes(model)
        paths.append(str(path))
    return paths


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind not installed")
def test_prepared_states_leak_nothing(tmp_path):
    run_leak_checked(*prepared_models(tmp_path))
