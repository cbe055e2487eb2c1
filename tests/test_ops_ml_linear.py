"""Parity of the ml_linear family (src/ops/ml_linear.c) against ORT's CPU EP in strict mode: LinearClassifier and LinearRegressor over
every claimed form, plus the forms that must be declined."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP, helper, numpy_helper

from ml_parity import D, F, I32, I64, ML, POSTS, check, claimed, ml_model, rng_data, tensor_attr
from parity import assert_parity, make_model, onnx_type, run_mlx


@pytest.mark.parametrize("post", POSTS)
@pytest.mark.parametrize("classes", ["1", "1-labels", 2, 3, 5])
def test_linear_classifier(post, classes):
    """One class: labels 1/0 and one raw score column (PROBIT only), or with two labels
    [1 - p, p] where p is the score or its logistic."""
    labels = classes != "1"
    classes = int(str(classes)[0])
    if classes == 1 and labels and post == "PROBIT":
        pytest.skip("declined: ORT leaves the second column unwritten")
    rng = np.random.default_rng(classes)
    feats = 4
    x = rng_data((6, feats), seed=1)
    attrs = {"coefficients": rng.uniform(-1, 1, classes * feats).astype(np.float32).tolist(),
             "intercepts": rng.uniform(-1, 1, classes).astype(np.float32).tolist(),
             "post_transform": post}
    if labels:
        attrs["classlabels_ints"] = list(range(10, 10 + max(classes, 2)))
    if post == "PROBIT":
        x = rng_data((6, feats), lo=-0.1, hi=0.1, seed=1)  # keep scores inside probit's domain
        attrs["coefficients"] = [c * 0.5 for c in attrs["coefficients"]]
        attrs["intercepts"] = [0.4 if classes > 1 else 0.5] * classes
    check("LinearClassifier", attrs, {"x": x}, [("y", I64), ("z", F)])


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int64])
def test_linear_classifier_input_types(dtype):
    x = rng_data((5, 3), dtype=dtype, seed=2)
    attrs = {"coefficients": [0.5, -1.0, 0.25, 1.0, 0.5, -0.75], "intercepts": [0.1, -0.2],
             "classlabels_ints": [3, 4]}
    check("LinearClassifier", attrs, {"x": x}, [("y", I64), ("z", F)])


def test_linear_classifier_ties_and_rank1():
    # equal scores: the first class wins; a rank-1 input is one row
    attrs = {"coefficients": [1.0, 0.0, 1.0, 0.0, 0.0, 1.0], "intercepts": [0.0, 0.0, 0.0],
             "classlabels_ints": [5, 6, 7]}
    check("LinearClassifier", attrs, {"x": np.array([[1, 1], [2, 3], [0, 0]], np.float32)}, [("y", I64), ("z", F)])
    check("LinearClassifier", attrs, {"x": np.array([2, 1], np.float32)}, [("y", I64), ("z", F)])


def test_linear_classifier_declined():
    attrs = {"coefficients": [1.0, 2.0], "intercepts": [0.5], "classlabels_strings": ["a", "b"]}
    x = np.ones((2, 2), np.float32)
    assert not claimed(ml_model("LinearClassifier", attrs, {"x": x}, [("y", TP.STRING), ("z", F)]))
    attrs = {"coefficients": [1.0, 2.0], "intercepts": [0.5], "classlabels_ints": [0, 1], "post_transform": "PROBIT"}
    assert not claimed(ml_model("LinearClassifier", attrs, {"x": x}, [("y", I64), ("z", F)]))


@pytest.mark.parametrize("post", POSTS)
@pytest.mark.parametrize("targets", [1, 3])
def test_linear_regressor(post, targets):
    rng = np.random.default_rng(targets)
    x = rng_data((5, 4), lo=-0.2, hi=0.2, seed=3)
    attrs = {"coefficients": rng.uniform(-0.5, 0.5, targets * 4).astype(np.float32).tolist(),
             "intercepts": [0.3] * targets, "targets": targets, "post_transform": post}
    check("LinearRegressor", attrs, {"x": x}, [("y", F)])


def test_linear_regressor_forms():
    attrs = {"coefficients": [1.0, -2.0, 0.5], "targets": 1}
    check("LinearRegressor", attrs, {"x": rng_data((3,), seed=4)}, [("y", F)])  # rank 1: one row
    attrs = {"coefficients": [1.0, -2.0, 0.5, 1.0, 1.0, 1.0], "targets": 2, "intercepts": [5.0]}  # ignored
    check("LinearRegressor", attrs, {"x": rng_data((4, 3), seed=4)}, [("y", F)])
