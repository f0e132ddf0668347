"""Nothing silently wrong (issue 36): inputs changed after the model is built are checked where
the logp runs, unclear cases end in one line naming the problem, and refusals name the method
and one that can."""

import json
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pymc as pm
import pytest

import pymc_crf as pmc

# Every case runs in one child process, so a segmentation fault (the MRF's label columns were
# indexed without bounds checks) fails this test instead of killing pytest; the child prints
# each case's exception type and message as JSON.
_SET_DATA_CASES = textwrap.dedent('''
    import json, warnings
    import numpy as np, pymc as pm, pymc_crf as pmc
    warnings.simplefilter("ignore")
    out = {}

    def cases(model, good, bad):
        """Compile the logp once; each bad update in turn, then the good data back."""
        f = model.compile_logp()
        point = model.initial_point()
        f(point)
        for name, updates in bad.items():
            pm.set_data(updates, model=model)
            try:
                out[name] = ["ok", float(f(point))]
            except Exception as err:  # reported to the parent, which checks the type
                out[name] = [type(err).__name__, str(err).splitlines()[0]]
            print(json.dumps({name: out[name]}), flush=True)
            pm.set_data(good, model=model)

    d = pmc.datasets.welling_parise_grid(3, 3, n_samples=20, seed=0)

    def mrf():
        with pm.Model() as m:
            y = pm.Data("y", d.samples)
            b = pm.Data("b", np.zeros(9))
            w = pm.Normal("w", 0, 1)
            pmc.MRF("x", graphs=d.graphs, node_weights=b, edge_weights=w,
                    parameterization="ising", observed=y)
        return m

    cases(mrf(), {"y": d.samples, "b": np.zeros(9)}, {
        "mrf_one_column_fewer": {"y": d.samples[:, :8]},
        "mrf_one_column_more": {"y": np.concatenate([d.samples, d.samples[:, :1]], 1)},
        "mrf_node_weights_short": {"b": np.zeros(8)},
        "mrf_fewer_rows": {"y": d.samples[:5]}})

    X = np.random.default_rng(0).normal(size=(7, 2))
    batch = pmc.GraphBatch.chains([2, 3, 2])

    def hcrf():
        with pm.Model() as m:
            y = pm.Data("y", np.array([0, 1, 0]))
            tx = pm.Normal("tx", 0, 1, shape=(2, 2))
            ty = pm.Normal("ty", 0, 1, shape=(2, 2))
            te = pm.Normal("te", 0, 1, shape=(2, 2, 2))
            pmc.HCRF("c", graphs=batch, node_features=X, theta_x=tx, theta_y=ty, theta_e=te,
                     observed=y)
        return m

    cases(hcrf(), {"y": np.array([0, 1, 0])}, {
        "hcrf_one_label": {"y": np.array([1])},
        "hcrf_one_label_more": {"y": np.array([0, 1, 0, 1])}})
''')


@pytest.fixture(scope="module")
def set_data_cases():
    proc = subprocess.run([sys.executable, "-c", _SET_DATA_CASES], capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, (f"the child process ended with {proc.returncode} "
                                  f"(-11: segmentation fault):\n{proc.stderr[-3000:]}")
    out = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            out.update(json.loads(line))
    return out


@pytest.mark.parametrize("case", ["mrf_one_column_fewer", "mrf_one_column_more"])
def test_mrf_labels_of_another_width_are_refused_by_name(set_data_cases, case):
    kind, message = set_data_cases[case]
    assert kind == "ValueError", (kind, message)
    assert "MRF labels (observed) must be an (n_samples, n_nodes) = (N, 9) matrix" in message


def test_mrf_data_weights_of_another_shape_are_refused_by_name(set_data_cases):
    kind, message = set_data_cases["mrf_node_weights_short"]
    assert kind == "ValueError", (kind, message)
    assert "MRF node_weights must have shape (9,) for parameterization='ising'" in message


def test_mrf_rows_may_change(set_data_cases):
    kind, value = set_data_cases["mrf_fewer_rows"]
    assert kind == "ok" and np.isfinite(value)


@pytest.mark.parametrize("case", ["hcrf_one_label", "hcrf_one_label_more"])
def test_hcrf_labels_of_another_length_are_refused_by_name(set_data_cases, case):
    """One label used to broadcast against all three graphs: a wrong likelihood, silently."""
    kind, message = set_data_cases[case]
    assert kind == "ValueError", (kind, message)
    assert "HCRF labels (observed) must be one class per graph, shape (3,)" in message
