"""Parity of the ai.onnx.ml family (src/ops/ml.c) against ORT's CPU EP in strict mode: linear
models, SVMs, tree ensembles, scalers and encoders over every claimed form (post-transforms,
kernels, binary-class quirks, aggregate functions, node modes), plus the forms that must be
declined."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP, helper, numpy_helper

import onnxruntime_ep_mlx as mlx_ep
from parity import assert_parity, make_model, onnx_type, run_mlx

ML = "ai.onnx.ml"
F, D, I64, I32 = TP.FLOAT, TP.DOUBLE, TP.INT64, TP.INT32
POSTS = ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"]


def ml_model(op, attrs, feeds, outs, opset=1, in_names=None):
    """One ai.onnx.ml node; feeds maps input name -> array, outs lists (name, dtype)."""
    names = in_names or list(feeds)
    node = helper.make_node(op, names, [o for o, _ in outs], domain=ML, **attrs)
    ins = [(k, onnx_type(v), list(np.shape(v))) for k, v in feeds.items()]
    return make_model([node], ins, [(o, t, None) for o, t in outs], domains=[(ML, opset)])


def check(op, attrs, feeds, outs, opset=1, rtol=None, atol=None):
    return assert_parity(ml_model(op, attrs, feeds, outs, opset), feeds, rtol=rtol, atol=atol)


def claimed(model) -> bool:
    """Whether the MLX EP claims the model's nodes (a strict session can be created)."""
    try:
        mlx_ep.session(model, strict=True)
        return True
    except Exception:  # noqa: BLE001 - ORT raises its own exception types
        return False


def rng_data(shape, dtype=np.float32, lo=-3.0, hi=3.0, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(int(lo), int(hi) + 1, size=shape).astype(dtype)
    return rng.uniform(lo, hi, size=shape).astype(dtype)


# ---- LinearClassifier / LinearRegressor ------------------------------------------------------

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


# ---- Scaler, Normalizer, Binarizer, Imputer --------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("per_feature", [False, True])
def test_scaler(dtype, per_feature):
    x = rng_data((4, 3), dtype=dtype, lo=-5, hi=5, seed=5)
    attrs = ({"scale": [0.5, 2.0, -1.5], "offset": [1.0, -0.25, 3.0]} if per_feature
             else {"scale": [0.3], "offset": [0.7]})
    check("Scaler", attrs, {"x": x}, [("y", F)])


def test_scaler_rank1_and_rank3():
    check("Scaler", {"scale": [0.5, 2.0, -1.5], "offset": [1.0, -0.25, 3.0]}, {"x": rng_data((3,), seed=6)}, [("y", F)])
    # rank 3: ORT indexes the tables with (flat index) % dims[1]
    check("Scaler", {"scale": [0.5, 2.0], "offset": [1.0, -0.25]}, {"x": rng_data((2, 2, 3), seed=6)}, [("y", F)])


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_normalizer(norm, dtype):
    x = rng_data((5, 4), dtype=dtype, lo=-4, hi=4, seed=7)
    x[1] = 0  # a row of norm 0 is copied
    check("Normalizer", {"norm": norm}, {"x": x}, [("y", F)])
    check("Normalizer", {"norm": norm}, {"x": x[2]}, [("y", F)])


@pytest.mark.parametrize("threshold", [None, 0.5, -1.0])
def test_binarizer(threshold):
    x = rng_data((3, 4, 5), seed=8)
    x[0, 0, :2] = threshold or 0.0
    attrs = {} if threshold is None else {"threshold": threshold}
    check("Binarizer", attrs, {"x": x}, [("y", F)])


def test_binarizer_double():
    """ORT's CPU EP has no double Binarizer: the spec's x > threshold stands in."""
    x = rng_data((4, 5), np.float64, seed=8)
    x[0, :2] = 0.5
    got = run_mlx(ml_model("Binarizer", {"threshold": 0.5}, {"x": x}, [("y", D)]), {"x": x})[0]
    np.testing.assert_array_equal(got, (x > np.float32(0.5)).astype(np.float64))


@pytest.mark.parametrize("form", ["float_one", "float_per_feature", "float_nan", "float_other_len", "int64"])
def test_imputer(form):
    x = rng_data((4, 3), seed=9).round()
    if form == "int64":
        x = x.astype(np.int64)
        attrs = {"imputed_value_int64s": [7, 8, 9], "replaced_value_int64": 1}
    elif form == "float_nan":
        x[1, 1] = x[2, 0] = np.nan
        attrs = {"imputed_value_floats": [7.0, 8.0, 9.0], "replaced_value_float": float("nan")}
    else:
        imputed = {"float_one": [7.0], "float_per_feature": [7.0, 8.0, 9.0], "float_other_len": [7.0, 8.0]}[form]
        attrs = {"imputed_value_floats": imputed, "replaced_value_float": 1.0}
    check("Imputer", attrs, {"x": x}, [("y", onnx_type(x))])


# ---- ArrayFeatureExtractor, FeatureVectorizer, OneHotEncoder ---------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("shape", [(5,), (3, 5), (2, 3, 5)])
def test_array_feature_extractor(dtype, shape):
    x = rng_data(shape, dtype=dtype, lo=-9, hi=9, seed=10)
    y = np.array([[4, 0], [2, 2]], np.int64)
    check("ArrayFeatureExtractor", {}, {"x": x, "y": y}, [("z", onnx_type(x))])


def test_feature_vectorizer():
    for dtype in (np.float32, np.float64, np.int32, np.int64):
        feeds = {"a": rng_data((3, 2), dtype, seed=11), "b": rng_data((3, 4), dtype, seed=12),
                 "c": rng_data((3, 1), dtype, seed=13), "d": rng_data((3, 2, 2), dtype, seed=14)}
        # b is cut to 3, c padded to 2, d flattened to 4
        check("FeatureVectorizer", {"inputdimensions": [2, 3, 2, 4]}, feeds, [("y", F)])
    check("FeatureVectorizer", {"inputdimensions": [3]}, {"a": rng_data((3,), seed=15)}, [("y", F)])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_one_hot_encoder(dtype):
    x = np.array([[1, 3, 5], [2, 9, 3]], dtype=dtype)
    if dtype != np.int64:
        x = x + dtype(0.7)  # truncated to int64
    check("OneHotEncoder", {"cats_int64s": [1, 2, 3, 5, 3], "zeros": 1}, {"x": x}, [("y", F)])
    check("OneHotEncoder", {"cats_int64s": [1, 2, 3, 5, 9], "zeros": 0}, {"x": x[0]}, [("y", F)])


def test_one_hot_encoder_declined():
    x = np.array([["a"]], dtype=object)
    node = helper.make_node("OneHotEncoder", ["x"], ["y"], domain=ML, cats_strings=["a", "b"])
    model = make_model([node], [("x", TP.STRING, [1, 1])], [("y", F, None)], domains=[(ML, 1)])
    assert not claimed(model)
    del x


# ---- LabelEncoder ----------------------------------------------------------------------------

def tensor_attr(name, values, dtype):
    return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


LABEL_FORMS = {
    # name: (opset, key dtype, attrs, output dtype)
    "int_float": (2, np.int64, {"keys_int64s": [1, 5, 3, 5], "values_floats": [0.5, 1.5, 2.5, 9.0]}, F),
    "int_float_default": (2, np.int64, {"keys_int64s": [1, 5], "values_floats": [0.5, 1.5], "default_float": 4.0}, F),
    "float_int": (2, np.float32, {"keys_floats": [0.5, -1.0, 0.0], "values_int64s": [3, 4, 5], "default_int64": 42}, I64),
    "float_float": (2, np.float32, {"keys_floats": [0.5, float("nan"), 2.0], "values_floats": [3.0, 4.0, 5.0]}, F),
    "int_int": (2, np.int64, {"keys_int64s": [7, 8], "values_int64s": [70, 80]}, I64),
    "v4_int_int": (4, np.int64, {"keys_int64s": [7, 8], "values_int64s": [70, 80]}, I64),
    "v4_int_float": (4, np.int64, {"keys_int64s": [7, 8], "values_floats": [0.5, 1.0]}, F),
    "v4_float_float_nan": (4, np.float32, {"keys_floats": [0.5, float("nan"), -0.0], "values_floats": [3.0, 4.0, 5.0]}, F),
    "v4_float_int": (4, np.float32, {"keys_floats": [0.5, 2.0], "values_int64s": [3, 4]}, I64),
    "v4_tensors": (4, np.int64, {"keys_tensor": tensor_attr("k", [1, 2, 3], np.int64),
                                 "values_tensor": tensor_attr("v", [1.5, 2.5, 3.5], np.float32),
                                 "default_tensor": tensor_attr("d", [-7.0], np.float32)}, F),
    "v4_double_double": (4, np.float64, {"keys_tensor": tensor_attr("k", [0.25, 1e300, float("nan")], np.float64),
                                         "values_tensor": tensor_attr("v", [1.0, 2.0, 3.0], np.float64)}, D),
    "v4_double_int": (4, np.float64, {"keys_tensor": tensor_attr("k", [0.25, 1.5], np.float64),
                                      "values_int64s": [10, 20]}, I64),
    "v4_int_double": (4, np.int64, {"keys_int64s": [1, 2], "values_tensor": tensor_attr("v", [0.1, 0.2], np.float64),
                                    "default_tensor": tensor_attr("d", [9.5], np.float64)}, D),
}


@pytest.mark.parametrize("form", list(LABEL_FORMS))
def test_label_encoder(form):
    opset, kt, attrs, vt = LABEL_FORMS[form]
    if np.dtype(kt).kind == "i":
        x = np.array([[1, 5, 3], [7, 8, 2], [0, 9, 1]], kt)
    else:
        big = 1e300 if kt == np.float64 else 3e38
        x = np.array([[0.5, np.nan, 2.0], [-0.0, 0.0, 1.5], [0.25, big, -1.0]]).astype(kt)
    check("LabelEncoder", attrs, {"x": x}, [("y", vt)], opset=opset)


def test_label_encoder_declined():
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain=ML, keys_int64s=[1, 2], values_strings=["a", "b"])
    model = make_model([node], [("x", I64, [2])], [("y", TP.STRING, None)], domains=[(ML, 2)])
    assert not claimed(model)


# ---- SVMRegressor / SVMClassifier ------------------------------------------------------------

KERNELS = {"LINEAR": [0.0, 0.0, 0.0], "POLY": [0.3, 0.5, 3.0], "POLY2": [0.2, 1.0, 2.0], "POLY4": [0.2, 0.1, 4.0],
           "RBF": [0.4, 0.0, 0.0], "SIGMOID": [0.3, 0.2, 0.0]}


def kernel_attrs(name):
    return {"kernel_type": name.rstrip("0123456789"), "kernel_params": KERNELS[name]}


@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("one_class", [0, 1])
def test_svm_regressor(kernel, one_class):
    rng = np.random.default_rng(20)
    feats, nsv = 3, 4
    attrs = {**kernel_attrs(kernel), "n_supports": nsv, "one_class": one_class,
             "support_vectors": rng.uniform(-1, 1, nsv * feats).astype(np.float32).tolist(),
             "coefficients": rng.uniform(-1, 1, nsv).astype(np.float32).tolist(), "rho": [0.25]}
    check("SVMRegressor", attrs, {"x": rng_data((6, feats), lo=-1, hi=1, seed=21)}, [("y", F)], rtol=1e-4, atol=1e-5)


def test_svm_regressor_linear_mode():
    attrs = {"coefficients": [0.5, -1.0, 2.0], "rho": [0.1], "kernel_params": [0.1, 0.2, 3.0], "kernel_type": "RBF"}
    check("SVMRegressor", attrs, {"x": rng_data((4, 3), seed=22)}, [("y", F)])


def svc_attrs(classes, vectors_per_class, feats, kernel, post, prob, seed):
    rng = np.random.default_rng(seed)
    nv = sum(vectors_per_class)
    pairs = classes * (classes - 1) // 2
    attrs = {**kernel_attrs(kernel), "classlabels_ints": list(range(100, 100 + classes)),
             "vectors_per_class": vectors_per_class, "post_transform": post,
             "support_vectors": rng.uniform(-1, 1, nv * feats).astype(np.float32).tolist(),
             "coefficients": rng.uniform(-1.5, 1.5, (classes - 1) * nv).astype(np.float32).tolist(),
             "rho": rng.uniform(-0.5, 0.5, pairs).astype(np.float32).tolist()}
    if prob:
        attrs["prob_a"] = rng.uniform(-3, -1, pairs).astype(np.float32).tolist()
        attrs["prob_b"] = rng.uniform(-0.3, 0.3, pairs).astype(np.float32).tolist()
    return attrs


@pytest.mark.parametrize("kernel", ["LINEAR", "POLY", "RBF", "SIGMOID"])
@pytest.mark.parametrize("classes,per_class", [(2, [2, 3]), (3, [2, 1, 3]), (4, [1, 2, 2, 1])])
@pytest.mark.parametrize("prob", [False, True])
def test_svm_classifier_svc(kernel, classes, per_class, prob):
    attrs = svc_attrs(classes, per_class, 3, kernel, "NONE", prob, seed=classes)
    check("SVMClassifier", attrs, {"x": rng_data((16, 3), lo=-1, hi=1, seed=23)}, [("y", I64), ("z", F)],
          rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("post", ["LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"])
@pytest.mark.parametrize("classes,prob", [(2, False), (3, False), (3, True)])
def test_svm_classifier_post(post, classes, prob):
    if classes == 2 and post == "PROBIT":
        pytest.skip("declined: ORT leaves the second column unwritten")
    attrs = svc_attrs(classes, [2] * classes, 3, "RBF", post, prob, seed=7)
    if post == "PROBIT" and not prob:
        attrs["coefficients"] = [c * 0.05 for c in attrs["coefficients"]]
        attrs["rho"] = [0.5] * len(attrs["rho"])
    check("SVMClassifier", attrs, {"x": rng_data((8, 3), lo=-1, hi=1, seed=24)}, [("y", I64), ("z", F)],
          rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("classes,positive", [(2, True), (2, False), (3, False)])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC"])
def test_svm_classifier_linear_mode(classes, positive, post):
    rng = np.random.default_rng(classes)
    coef = rng.uniform(0 if positive else -1, 1, classes * 3).astype(np.float32).tolist()
    attrs = {"coefficients": coef, "rho": [-0.4], "classlabels_ints": list(range(classes)), "post_transform": post,
             "kernel_params": [0.0, 0.0, 0.0]}
    check("SVMClassifier", attrs, {"x": rng_data((10, 3), lo=-1, hi=1, seed=25)}, [("y", I64), ("z", F)])


@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_svm_classifier_input_types(dtype):
    attrs = svc_attrs(3, [1, 2, 1], 2, "POLY2", "NONE", True, seed=3)
    check("SVMClassifier", attrs, {"x": rng_data((5, 2), dtype=dtype, lo=-2, hi=2, seed=26)}, [("y", I64), ("z", F)],
          rtol=1e-4, atol=1e-5)


# ---- tree ensembles --------------------------------------------------------------------------

GRID = np.array([-1.0, -0.5, 0.0, 0.25, 0.5, 1.0], np.float32)  # thresholds and inputs share values: ties


def random_tree(rng, depth, feats, targets, modes, weights_per_leaf, missing, member=False):
    """An abstract tree: ("leaf", [(target, weight)]) or ("node", feat, thr, mode, miss, set, true, false)."""
    if depth == 0 or (depth < 3 and rng.random() < 0.3):
        k = weights_per_leaf if weights_per_leaf else int(rng.integers(0, 3))
        return ("leaf", [(int(rng.integers(targets)), float(np.float32(rng.uniform(-1, 1)))) for _ in range(k)])
    mode = str(rng.choice(modes))
    members = None
    if mode == "BRANCH_MEMBER":
        big = rng.random() < 0.5  # ORT unrolls small sets of 0..30 into BRANCH_EQ chains, keeps big ones
        members = sorted(set(rng.integers(0, 60 if big else 8, size=int(rng.integers(1, 5))).tolist()))
    return ("node", int(rng.integers(feats)), float(rng.choice(GRID)), mode, bool(missing and rng.random() < 0.5),
            members, random_tree(rng, depth - 1, feats, targets, modes, weights_per_leaf, missing),
            random_tree(rng, depth - 1, feats, targets, modes, weights_per_leaf, missing))


def v3_attrs(trees, classifier, shuffle_rng=None):
    """Attributes of TreeEnsembleRegressor/Classifier: each tree's root listed first."""
    a = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes", "nodes_values",
                         "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true")}
    w = {k: [] for k in ("treeids", "nodeids", "ids", "weights")}
    for t, tree in enumerate(trees):
        rows = []

        def visit(node):
            nid = len(rows)
            rows.append(None)
            if node[0] == "leaf":
                rows[nid] = (nid, 0, "LEAF", 0.0, 0, 0, 0)
                for target, weight in node[1]:
                    w["treeids"].append(t), w["nodeids"].append(nid), w["ids"].append(target), w["weights"].append(weight)
            else:
                _, feat, thr, mode, miss, _, tnode, fnode = node
                ti, fi = visit(tnode), visit(fnode)
                rows[nid] = (nid, feat, mode, thr, ti, fi, int(miss))
            return nid

        visit(tree)
        order = [0] + (list(shuffle_rng.permutation(range(1, len(rows)))) if shuffle_rng else list(range(1, len(rows))))
        for i in order:
            nid, feat, mode, thr, ti, fi, miss = rows[i]
            for key, val in zip(("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes", "nodes_values",
                                 "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true"),
                                (t, nid, feat, mode, thr, ti, fi, miss)):
                a[key].append(val)
    pfx = "class" if classifier else "target"
    a.update({f"{pfx}_treeids": w["treeids"], f"{pfx}_nodeids": w["nodeids"], f"{pfx}_ids": w["ids"],
              f"{pfx}_weights": w["weights"]})
    return a


V5_MODES = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4, "BRANCH_NEQ": 5,
            "BRANCH_MEMBER": 6}


def v5_attrs(trees, dtype):
    nodes, leaves, roots, members = [], [], [], []

    def visit(node):
        if node[0] == "leaf":
            leaves.append(node[1][0])
            return len(leaves) - 1, 1
        _, feat, thr, mode, miss, mset, tnode, fnode = node
        i = len(nodes)
        nodes.append(None)
        if mode == "BRANCH_MEMBER":
            members.extend(mset + [float("nan")])
        ti, tl = visit(tnode)
        fi, fl = visit(fnode)
        nodes[i] = (feat, thr, V5_MODES[mode], int(miss), ti, tl, fi, fl)
        return i, 0

    for tree in trees:
        assert tree[0] == "node"
        roots.append(visit(tree)[0])
    col = lambda k: [n[k] for n in nodes]  # noqa: E731
    a = {"nodes_featureids": col(0), "nodes_splits": tensor_attr("s", col(1), dtype),
         "nodes_modes": tensor_attr("m", col(2), np.uint8), "nodes_missing_value_tracks_true": col(3),
         "nodes_truenodeids": col(4), "nodes_trueleafs": col(5), "nodes_falsenodeids": col(6),
         "nodes_falseleafs": col(7), "tree_roots": roots, "leaf_targetids": [t for t, _ in leaves],
         "leaf_weights": tensor_attr("w", [w for _, w in leaves], dtype)}
    if members:
        a["membership_values"] = tensor_attr("mv", members, dtype)
    return a


def tree_input(rng, rows, feats, dtype, nan=False):
    x = rng.choice(np.concatenate([GRID, rng.uniform(-1.2, 1.2, 6).astype(np.float32)]), size=(rows, feats))
    if nan:
        x[rng.random((rows, feats)) < 0.2] = np.nan
    return x.astype(dtype)


ALL_MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]


@pytest.mark.parametrize("agg", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("targets", [1, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tree_regressor(agg, targets, dtype):
    rng = np.random.default_rng(targets * 10 + len(agg))
    trees = [random_tree(rng, 4, 3, targets, ALL_MODES, 0, missing=True) for _ in range(5)]
    attrs = {**v3_attrs(trees, False, rng), "n_targets": targets, "aggregate_function": agg,
             "base_values": [0.5 * (i + 1) for i in range(targets)]}
    x = tree_input(rng, 40, 3, dtype, nan=True)
    check("TreeEnsembleRegressor", attrs, {"x": x}, [("y", F)], opset=3)


@pytest.mark.parametrize("post", POSTS)
@pytest.mark.parametrize("targets", [1, 4])
def test_tree_regressor_post(post, targets):
    rng = np.random.default_rng(5)
    trees = [random_tree(rng, 3, 2, targets, ["BRANCH_LEQ"], 1, missing=False) for _ in range(4)]
    attrs = {**v3_attrs(trees, False), "n_targets": targets, "post_transform": post}
    if post == "PROBIT":  # scores inside (0, 1)
        attrs["target_weights"] = [abs(w) / 8 + 0.01 for w in attrs["target_weights"]]
    check("TreeEnsembleRegressor", attrs, {"x": tree_input(rng, 16, 2, np.float32)}, [("y", F)], opset=1)


def test_tree_regressor_tensor_attrs():
    rng = np.random.default_rng(6)
    trees = [random_tree(rng, 3, 2, 2, ["BRANCH_LT"], 1, missing=False) for _ in range(3)]
    attrs = v3_attrs(trees, False)
    values, weights = attrs.pop("nodes_values"), attrs.pop("target_weights")
    attrs.update({"n_targets": 2, "nodes_values_as_tensor": tensor_attr("v", values, np.float64),
                  "target_weights_as_tensor": tensor_attr("w", weights, np.float64),
                  "base_values_as_tensor": tensor_attr("b", [0.1, 0.2], np.float64)})
    check("TreeEnsembleRegressor", attrs, {"x": tree_input(rng, 12, 2, np.float64)}, [("y", F)], opset=3)


@pytest.mark.parametrize("classes", [3, 5])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("base", [False, True])
def test_tree_classifier_multiclass(classes, post, base):
    rng = np.random.default_rng(classes)
    trees = [random_tree(rng, 4, 3, classes, ALL_MODES, 0, missing=True) for _ in range(6)]
    attrs = {**v3_attrs(trees, True), "classlabels_int64s": list(range(20, 20 + classes)), "post_transform": post}
    if base:
        attrs["base_values"] = [0.1 * i for i in range(classes)]
    check("TreeEnsembleClassifier", attrs, {"x": tree_input(rng, 30, 3, np.float32, nan=True)}, [("y", I64), ("z", F)])


@pytest.mark.parametrize("ids", ["one_id_positive", "one_id_mixed", "two_ids"])
@pytest.mark.parametrize("base", [None, [0.25], [0.25, -0.5]])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_tree_classifier_binary(ids, base, post):
    if ids == "two_ids" and base is not None and len(base) == 1:
        pytest.skip("declined: ORT leaves the second column unwritten")
    rng = np.random.default_rng(len(ids))
    trees = [random_tree(rng, 3, 2, 2, ["BRANCH_LEQ", "BRANCH_GT"], 1, missing=False) for _ in range(3)]
    attrs = v3_attrs(trees, True)
    if ids != "two_ids":
        attrs["class_ids"] = [1 if ids == "one_id_positive" else 0] * len(attrs["class_ids"])
    if ids == "one_id_positive":
        attrs["class_weights"] = [abs(w) for w in attrs["class_weights"]]
    attrs.update({"classlabels_int64s": [7, 9], "post_transform": post})
    if base is not None:
        attrs["base_values"] = base
    check("TreeEnsembleClassifier", attrs, {"x": tree_input(rng, 24, 2, np.float32)}, [("y", I64), ("z", F)])


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.int32])
def test_tree_classifier_input_types(dtype):
    rng = np.random.default_rng(9)
    trees = [random_tree(rng, 3, 2, 3, ALL_MODES, 1, missing=False) for _ in range(3)]
    attrs = {**v3_attrs(trees, True), "classlabels_int64s": [1, 2, 3]}
    x = (tree_input(rng, 12, 2, np.float64) * 2).astype(dtype)
    check("TreeEnsembleClassifier", attrs, {"x": x}, [("y", I64), ("z", F)])


def test_tree_classifier_declined():
    rng = np.random.default_rng(10)
    trees = [random_tree(rng, 2, 2, 2, ["BRANCH_LEQ"], 1, missing=False)]
    attrs = {**v3_attrs(trees, True), "classlabels_int64s": [0, 1], "post_transform": "PROBIT"}
    x = tree_input(rng, 4, 2, np.float32)
    assert not claimed(ml_model("TreeEnsembleClassifier", attrs, {"x": x}, [("y", I64), ("z", F)]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("agg", [0, 1, 2, 3])
@pytest.mark.parametrize("post", [0, 3, 4])
def test_tree_ensemble_v5(dtype, agg, post):
    rng = np.random.default_rng(agg * 7 + post)
    modes = ALL_MODES + ["BRANCH_MEMBER"]
    trees = [random_tree(rng, 4, 3, 2, modes, 1, missing=True) for _ in range(4)]
    trees = [t if t[0] == "node" else random_tree(rng, 4, 3, 2, ["BRANCH_LEQ"], 1, False, ) for t in trees]
    trees = [t for t in trees if t[0] == "node"]
    attrs = {**v5_attrs(trees, dtype), "n_targets": 2, "aggregate_function": agg, "post_transform": post}
    x = tree_input(rng, 30, 3, dtype, nan=True)
    x[:, 0] = rng.integers(0, 60, size=30)  # member sets hold integers
    if post == 4:  # keep PROBIT inside its domain
        attrs["leaf_weights"] = tensor_attr("w", np.abs(numpy_helper.to_array(attrs["leaf_weights"])) / 8 + 0.01, dtype)
    # ORT computes the transforms in float32 even for double scores: compare those at float precision
    tol = {"rtol": 1e-6, "atol": 1e-7} if post and dtype == np.float64 else {}
    check("TreeEnsemble", attrs, {"x": x}, [("y", onnx_type(x))], opset=5, **tol)


def test_tree_ensemble_v5_declined():
    rng = np.random.default_rng(11)
    trees = [random_tree(rng, 2, 2, 2, ["BRANCH_LEQ"], 1, missing=False)]
    trees = [t for t in trees if t[0] == "node"] or [("node", 0, 0.0, "BRANCH_LEQ", False, None,
                                                       ("leaf", [(0, 1.0)]), ("leaf", [(1, 2.0)]))]
    x = tree_input(rng, 4, 2, np.float32)
    for post in (1, 2):  # ORT and the spec disagree on which is SOFTMAX
        attrs = {**v5_attrs(trees, np.float32), "n_targets": 2, "post_transform": post}
        assert not claimed(ml_model("TreeEnsemble", attrs, {"x": x}, [("y", F)], opset=5))


@pytest.mark.parametrize("kind", ["int", "float", "double"])
def test_label_encoder_many_keys(kind):
    """Large key tables (found by bisection), with duplicates and signed zeros."""
    rng = np.random.default_rng(12)
    if kind == "int":
        keys = rng.integers(-5000, 5000, 3000)
        attrs = {"keys_int64s": keys.tolist(), "values_int64s": rng.integers(0, 99, 3000).tolist()}
        x = rng.integers(-6000, 6000, (40, 25)).astype(np.int64)
        vt, opset = I64, 2
    else:
        dt = np.float32 if kind == "float" else np.float64
        keys = np.concatenate([rng.integers(-300, 300, 2000) / 4, [0.0, -0.0, np.nan, np.nan]]).astype(dt)
        x = np.concatenate([rng.integers(-400, 400, 990) / 4, [0.0, -0.0, np.nan, np.inf]]).astype(dt).reshape(2, 497)
        vals = rng.uniform(-9, 9, keys.size).astype(dt)
        if kind == "float":
            attrs, vt = {"keys_floats": keys.tolist(), "values_floats": vals.tolist()}, F
        else:
            attrs = {"keys_tensor": tensor_attr("k", keys, dt), "values_tensor": tensor_attr("v", vals, dt)}
            vt = D
        opset = 4
    check("LabelEncoder", attrs, {"x": x}, [("y", vt)], opset=opset)


def test_tree_ensemble_v5_big_set():
    """A BRANCH_MEMBER set of 200 values (ORT keeps it as one set) and a small one (unrolled into
    BRANCH_EQ chains by ORT), with missing values tracking true on the big one."""
    members = list(range(0, 400, 2))
    attrs = {"nodes_featureids": [0, 1], "nodes_splits": tensor_attr("s", [0.0, 0.0], np.float32),
             "nodes_modes": tensor_attr("m", [6, 6], np.uint8), "nodes_missing_value_tracks_true": [1, 0],
             "nodes_truenodeids": [1, 0], "nodes_trueleafs": [0, 1], "nodes_falsenodeids": [1, 1],
             "nodes_falseleafs": [1, 1], "tree_roots": [0], "leaf_targetids": [0, 1, 0],
             "leaf_weights": tensor_attr("w", [1.0, 2.0, 3.0], np.float32),
             "membership_values": tensor_attr("mv", members + [np.nan] + [3, 5, 7] + [np.nan], np.float32),
             "n_targets": 2}
    rng = np.random.default_rng(13)
    x = rng.integers(0, 401, (64, 2)).astype(np.float32)
    x[::7, 0] = np.nan
    check("TreeEnsemble", attrs, {"x": x}, [("y", F)], opset=5)


def test_tree_regressor_shared_leaf():
    """A chain of BRANCH_EQ nodes whose true branches share one leaf (how converters express set
    membership before opset 5)."""
    attrs = {"n_targets": 1, "nodes_treeids": [0] * 5, "nodes_nodeids": [0, 1, 2, 3, 4],
             "nodes_featureids": [0, 0, 0, 0, 0], "nodes_modes": ["BRANCH_EQ", "BRANCH_EQ", "LEAF", "BRANCH_EQ", "LEAF"],
             "nodes_values": [1.0, 2.0, 0.0, 3.0, 0.0], "nodes_truenodeids": [2, 2, 0, 2, 0],
             "nodes_falsenodeids": [1, 3, 0, 4, 0], "target_treeids": [0, 0], "target_nodeids": [2, 4],
             "target_ids": [0, 0], "target_weights": [10.0, -1.0]}
    x = np.array([[0.0], [1.0], [2.0], [3.0], [4.0], [np.nan]], np.float32)
    check("TreeEnsembleRegressor", attrs, {"x": x}, [("y", F)], opset=1)
