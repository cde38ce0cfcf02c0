import numpy as np
import pytest
from scipy.stats import wasserstein_distance

from mindsimkit.validation.distances import (
    FeatureSample,
    compare_samples,
    joint_distance,
    noise_floor,
    patient_draws,
    w1,
    w1_batch,
)


def _sample(values, patients=None):
    values = np.asarray(values, dtype=float)
    if values.ndim == 1:
        values = values[:, None]
    n = values.shape[0]
    return FeatureSample(values, np.arange(n) if patients is None else np.asarray(patients))


def test_known_shift_gives_the_shift():
    x = np.random.default_rng(0).normal(size=500)
    assert w1(x, x + 1.7) == pytest.approx(1.7)
    assert wasserstein_distance(x, x + 1.7) == pytest.approx(1.7)


@pytest.mark.parametrize("seed", range(5))
def test_fast_w1_agrees_with_scipy_weighted_and_unweighted(seed):
    rng = np.random.default_rng(seed)
    u, v = rng.normal(size=int(rng.integers(1, 80))), rng.gamma(2.0, size=int(rng.integers(1, 80)))
    wu, wv = rng.integers(0, 4, size=u.size).astype(float) + 0.5, rng.random(v.size)
    assert w1(u, v) == pytest.approx(wasserstein_distance(u, v), rel=1e-10, abs=1e-12)
    assert w1(u, v, wu, wv) == pytest.approx(wasserstein_distance(u, v, wu, wv), rel=1e-10, abs=1e-12)


def test_batch_rows_equal_single_calls_and_ties_are_handled():
    rng = np.random.default_rng(3)
    a, b = rng.integers(0, 5, 40).astype(float), rng.integers(0, 5, 30).astype(float)  # many ties
    wa, wb = rng.integers(0, 3, (7, 40)).astype(float), rng.integers(0, 3, (7, 30)).astype(float)
    got = w1_batch(a, b, wa, wb)
    want = [wasserstein_distance(a, b, wa[i], wb[i]) if wa[i].sum() and wb[i].sum() else np.nan for i in range(7)]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_patient_draws_resample_whole_patients():
    counts = patient_draws(np.random.default_rng(0), 50, 200)
    assert counts.shape == (200, 50) and np.all(counts.sum(axis=1) == 50)
    # With two conversations per patient, a replicate weights both conversations of a patient alike.
    patients = np.repeat(np.arange(50), 2)
    weights = counts[:, patients]
    assert np.array_equal(weights[:, 0::2], weights[:, 1::2])


def test_normalised_distance_of_a_shift_and_interval_contains_it():
    rng = np.random.default_rng(1)
    ref = rng.normal(size=800)
    sim = rng.normal(size=400) + 0.5
    res = compare_samples(_sample(ref), _sample(sim), ("x",), draws=500, level=0.95, seed=0)
    est = res.features["x"]
    assert est.distance == pytest.approx(w1(ref, sim) / ref.std())
    assert est.ci[0] <= est.distance <= est.ci[1]
    assert 0.35 < est.distance < 0.65
    assert res.index.distance == pytest.approx(est.distance)


def test_intervals_shrink_with_more_data():
    rng = np.random.default_rng(2)

    def width(n):
        ref, sim = rng.normal(size=n), rng.normal(size=n) + 0.5
        ci = compare_samples(_sample(ref), _sample(sim), ("x",), draws=400, level=0.95, seed=1).features["x"].ci
        return ci[1] - ci[0]

    assert width(1600) < width(100) / 2


def test_patient_grouping_widens_intervals():
    """Ten conversations per patient that are near copies carry less information than independent
    ones; resampling patients must show that, resampling conversations would not."""
    rng = np.random.default_rng(4)
    base_ref, base_sim = rng.normal(size=40), rng.normal(size=40) + 0.5
    ref = np.repeat(base_ref, 10) + rng.normal(scale=0.01, size=400)
    sim = np.repeat(base_sim, 10) + rng.normal(scale=0.01, size=400)
    grouped = compare_samples(
        _sample(ref, np.repeat(np.arange(40), 10)),
        _sample(sim, np.repeat(np.arange(40), 10)),
        ("x",),
        draws=400,
        level=0.95,
        seed=0,
    )
    flat = compare_samples(_sample(ref), _sample(sim), ("x",), draws=400, level=0.95, seed=0)
    width = lambda r: r.features["x"].ci[1] - r.features["x"].ci[0]  # noqa: E731
    assert width(grouped) > 2 * width(flat)


def test_index_is_the_mean_of_the_feature_distances():
    rng = np.random.default_rng(5)
    ref, sim = rng.normal(size=(300, 3)), rng.normal(size=(200, 3)) + [0.2, 0.5, 1.0]
    res = compare_samples(_sample(ref), _sample(sim), ("a", "b", "c"), draws=200, level=0.95, seed=0)
    assert res.index.distance == pytest.approx(np.mean([res.features[k].distance for k in "abc"]))
    assert res.index.ci[0] <= res.index.distance <= res.index.ci[1]


def test_nan_values_drop_out_of_that_feature_only():
    rng = np.random.default_rng(6)
    ref, sim = rng.normal(size=(200, 2)), rng.normal(size=(100, 2)) + 1.0
    sim_nan = sim.copy()
    sim_nan[:10, 1] = np.nan
    res = compare_samples(_sample(ref), _sample(sim_nan), ("a", "b"), draws=50, level=0.95, seed=0)
    assert res.features["a"].distance == pytest.approx(w1(ref[:, 0], sim[:, 0]) / ref[:, 0].std())
    assert res.features["b"].distance == pytest.approx(w1(ref[:, 1], sim[10:, 1]) / ref[:, 1].std())


def test_floor_of_the_reference_against_itself_is_small_and_positive():
    rng = np.random.default_rng(7)
    ref = _sample(rng.normal(size=(1000, 2)), np.arange(1000) // 2)
    floor = noise_floor(ref, ("a", "b"), splits=100, quantile=0.95, seed=0)
    assert 0 < floor["a"] < 0.3 and 0 < floor["b"] < 0.3 and 0 < floor["index"] < 0.3
    # A real shift sits well above the floor.
    sim = _sample(rng.normal(size=(500, 2)) + 1.0)
    res = compare_samples(ref, sim, ("a", "b"), draws=100, level=0.95, seed=0)
    assert res.index.ci[0] > floor["index"]


def test_joint_distance_of_a_shift_along_one_axis():
    rng = np.random.default_rng(8)
    ref = rng.normal(size=(300, 3)) * [1.0, 2.0, 5.0]
    sim = ref + [0.0, 0.0, 5.0]  # one SD of the third feature
    sd = ref.std(axis=0)
    assert joint_distance(ref, sim) == pytest.approx(5.0 / sd[2], rel=1e-6)
    assert joint_distance(ref, ref) == pytest.approx(0.0, abs=1e-6)


def test_constant_reference_feature_is_undefined_and_left_out_of_the_index():
    rng = np.random.default_rng(9)
    ref = np.column_stack([rng.normal(size=200), np.zeros(200)])
    sim = np.column_stack([rng.normal(size=100) + 1.0, rng.random(100)])
    res = compare_samples(_sample(ref), _sample(sim), ("a", "b"), draws=100, level=0.95, seed=0)
    assert np.isnan(res.features["b"].distance) and res.undefined == ["b"]
    assert res.index.distance == pytest.approx(res.features["a"].distance)
    assert np.isfinite(res.index.ci).all()
    floor = noise_floor(_sample(ref), ("a", "b"), splits=20, quantile=0.95, seed=0)
    assert np.isnan(floor["b"]) and floor["index"] == pytest.approx(floor["a"])


def test_noise_floor_equals_a_brute_force_loop_over_the_same_splits():
    """Each split: a random permutation of the patients (argsort of one `rng.random` row per split), its first half
    plays the reference; every conversation of a patient goes with the patient; W1 from scipy divided by the first
    half's population SD; the floor is the 95th percentile over splits, the index the same over the features' mean."""
    rng = np.random.default_rng(11)
    patients = np.array([0, 0, 1, 2, 2, 2, 3, 4, 5, 5, 6, 7])  # 8 patients, one to three conversations each
    values = rng.gamma(2.0, size=(patients.size, 2)) * [1.0, 4.0]
    ref = _sample(values, patients)
    splits, seed = 25, 3
    floor = noise_floor(ref, ("a", "b"), splits=splits, quantile=0.95, seed=seed)

    order = np.argsort(np.random.default_rng(seed).random((splits, 8)), axis=1)
    per_split = []
    for row in order:
        first, second = set(row[:4].tolist()), set(row[4:].tolist())
        d = []
        for f in range(2):
            a = values[[p in first for p in patients], f]
            b = values[[p in second for p in patients], f]
            d.append(wasserstein_distance(a, b) / a.std())
        per_split.append(d)
    per_split = np.array(per_split)
    assert floor["a"] == pytest.approx(np.percentile(per_split[:, 0], 95), rel=1e-9)
    assert floor["b"] == pytest.approx(np.percentile(per_split[:, 1], 95), rel=1e-9)
    assert floor["index"] == pytest.approx(np.percentile(per_split.mean(axis=1), 95), rel=1e-9)
    assert len({round(x, 9) for x in per_split[:, 0]}) > 5  # the splits differ


def test_the_joint_distance_loads_no_array_library_besides_numpy():
    """POT imports every array library it finds as a backend (torch, with the train extra: about half of its
    import time, in every process that validates a run); the joint distance declines them. In a fresh interpreter,
    so what an earlier test imported does not count; where torch is not installed there is nothing to decline."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed (the train extra), so POT could not import it anyway")
    code = (
        "import sys, numpy as np\n"
        "from mindsimkit.validation.distances import joint_distance\n"
        "d = joint_distance(np.zeros((3, 2)), np.ones((3, 2)))\n"
        "print(round(d, 6), 'torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    distance, torch_loaded = done.stdout.split()
    assert float(distance) > 0 and torch_loaded == "False"
