"""Parity of the ml family (src/ops/ml.c) against ORT's CPU EP in strict mode: scalers and encoders
over every claimed form, plus the forms that must be declined (linear models, SVMs and tree
ensembles are test_ops_ml_linear.py, test_ops_ml_svm.py and test_ops_ml_trees.py)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP, helper, numpy_helper

from ml_parity import D, F, I32, I64, ML, POSTS, check, claimed, ml_model, rng_data, tensor_attr
from parity import assert_parity, make_model, onnx_type, run_mlx


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


# ---- TfIdfVectorizer (ai.onnx) ----------------------------------------------------------------

# unigrams 2, 3, 5, 7; bigrams (3, 5), (5, 7), (7, 2); trigram (2, 3, 5)
TFIDF_POOL = {"pool_int64s": [2, 3, 5, 7, 3, 5, 5, 7, 7, 2, 2, 3, 5], "ngram_counts": [0, 4, 10]}


def tfidf_model(attrs, x):
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs)
    return make_model([node], [("x", onnx_type(x), list(x.shape))], [("y", F, None)], opset=9)


def tfidf_check(attrs, x):
    assert_parity(tfidf_model(attrs, x), {"x": x}, rtol=1e-6, atol=1e-6)


def tfidf_attrs(mode, lo, hi, skip, weights=False, indexes=None):
    idx = indexes or [7, 0, 3, 1, 6, 2, 5, 4]
    a = {**TFIDF_POOL, "mode": mode, "min_gram_length": lo, "max_gram_length": hi, "max_skip_count": skip,
         "ngram_indexes": idx}
    if weights:
        a["weights"] = [0.5, 1.25, 2.0, 0.1, 3.0, 0.7, 1.5, 0.3][:len(idx)]
    return a


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("lo,hi,skip", [(1, 1, 0), (1, 2, 0), (2, 3, 2), (1, 3, 3), (3, 3, 1)])
@pytest.mark.parametrize("weights", [False, True])
def test_tfidf(mode, lo, hi, skip, weights):
    x = np.random.default_rng(lo * 10 + skip).choice([2, 3, 5, 7, 9], size=(3, 12)).astype(np.int64)
    tfidf_check(tfidf_attrs(mode, lo, hi, skip, weights), x)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("shape", [(12,), (1, 5), (2, 1), (4, 0), (0,)])
def test_tfidf_shapes_and_dtypes(dtype, shape):
    x = np.random.default_rng(3).choice([2, 3, 5, 7], size=shape).astype(dtype)
    tfidf_check(tfidf_attrs("TF", 1, 3, 2), x)


def test_tfidf_shared_output_indexes_and_holes():
    """Several n-grams counted into one output, and outputs no n-gram maps to (zeros)."""
    x = np.array([[2, 3, 5, 7, 2, 3, 5, 7, 7, 2]], np.int64)
    tfidf_check(tfidf_attrs("TF", 1, 3, 1, indexes=[0, 0, 2, 9, 2, 5, 5, 0]), x)
    tfidf_check(tfidf_attrs("TFIDF", 1, 2, 0, weights=False, indexes=[1, 1, 4, 4, 0, 3, 3, 8]), x)
    tfidf_check(tfidf_attrs("TFIDF", 1, 3, 2, weights=True, indexes=[1, 1, 4, 4, 0, 3, 3, 8]), x)


def test_tfidf_any_token_values():
    """Tokens are only compared with the pool: extreme and negative values count as misses."""
    i64 = np.iinfo(np.int64)
    x = np.array([[2, i64.max, 3, 5, i64.min, -7, 7, 2, 3, 5]], np.int64)
    tfidf_check(tfidf_attrs("TF", 1, 3, 2), x)
    tfidf_check(tfidf_attrs("TF", 1, 3, 2), np.array([[2, 2**31 - 1, 3, -2**31, 5]], np.int32))


def test_tfidf_declined_forms():
    x = np.array([2, 3, 5], np.int64)
    dup = {**tfidf_attrs("TF", 1, 2, 0), "pool_int64s": [2, 3, 2, 7, 3, 5, 5, 7, 7, 2, 2, 3, 5]}
    short = tfidf_attrs("TF", 1, 3, 0, indexes=[0, 1, 2])  # ORT would read past ngram_indexes
    # IDF weights of n-grams sharing an output: ORT keeps the weight of the last one it meets
    shared_idf = tfidf_attrs("IDF", 1, 3, 0, weights=True, indexes=[7, 0, 3, 1, 6, 2, 5, 7])
    for attrs in (dup, short, shared_idf):
        assert not claimed(tfidf_model(attrs, x))
    assert claimed(tfidf_model(tfidf_attrs("TF", 1, 2, 0), x))
    far = tfidf_attrs("IDF", 1, 3, 0, weights=True, indexes=[7, 0, 3, 1, 6, 2, 5, 40])  # weights are per n-gram
    tfidf_check(far, np.array([[2, 3, 5, 7, 2, 3, 5]], np.int64))


# ---- MurmurHash3 (com.microsoft) ----------------------------------------------------------------

def _murmur_reference(x, seed, positive):
    """MurmurHash3_x86_32 of each element's bytes, written out."""
    mask = 0xFFFFFFFF

    def rotl(v, r):
        return ((v << r) | (v >> (32 - r))) & mask

    n = x.dtype.itemsize
    out = []
    for row in np.ascontiguousarray(x).view(np.uint32).reshape(-1, n // 4):
        h = seed & mask
        for k in (int(v) for v in row):
            k = rotl((k * 0xCC9E2D51) & mask, 15) * 0x1B873593 & mask
            h = (rotl(h ^ k, 13) * 5 + 0xE6546B64) & mask
        h ^= n
        h ^= h >> 16
        h = (h * 0x85EBCA6B) & mask
        h ^= h >> 13
        h = (h * 0xC2B2AE35) & mask
        h ^= h >> 16
        out.append(h)
    y = np.array(out, np.uint32).reshape(x.shape)
    return y if positive else y.view(np.int32)


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64, np.uint64, np.float32, np.float64])
@pytest.mark.parametrize("seed,positive", [(0, 1), (42, 0), (0xDEADBEEF, 1)])
def test_murmur_hash3(dtype, seed, positive):
    from parity import NP_TO_ONNX
    rng = np.random.default_rng(seed % 97)
    x = (rng.integers(-(2**30), 2**30, (3, 5)) if np.dtype(dtype).kind in "iu" else rng.standard_normal((3, 5))).astype(dtype)
    node = helper.make_node("MurmurHash3", ["x"], ["y"], domain="com.microsoft", seed=seed, positive=positive)
    model = make_model([node], [("x", NP_TO_ONNX[np.dtype(dtype)], [3, 5])],
                       [("y", TP.UINT32 if positive else TP.INT32, None)], domains=[("com.microsoft", 1)])
    got = assert_parity(model, {"x": x})[0]
    np.testing.assert_array_equal(got, _murmur_reference(x, seed, positive))
