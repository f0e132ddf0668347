"""Writes the saved-result fixtures of tests/test_saved_results.py: a tiny chain CRF fitted by
``method="map"`` and by ``method="bethe_laplace"``, each saved to netCDF, with the test graphs and
the marginals ``pmc.predict`` gave for them when the files were written (``saved_expected.npz``).

The fixtures were written once, by the package as it was at commit 9f7bff6 (before the model layer
moved to ``pymc_crf.model``); rerunning this script overwrites them with the current package's
results, which defeats their purpose (results saved by an older version still load and predict)."""

from pathlib import Path

import numpy as np
import pymc as pm

import pymc_crf as pmc

HERE = Path(__file__).parent


def chain_data(lengths, seed):
    """Random node and edge features and labels on chains of the given lengths (K = 3)."""
    rng = np.random.default_rng(seed)
    graphs = pmc.GraphBatch.chains(lengths)
    X = rng.normal(size=(graphs.n_total_nodes, 2))
    Xe = rng.normal(size=(graphs.n_edges, 1))
    y = rng.integers(0, 3, size=graphs.n_total_nodes)
    return pmc.datasets.CRFData(graphs=graphs, labels=y, node_features=X, edge_features=Xe,
                                n_labels=3)


def main():
    train, test = chain_data([4, 3, 5, 4], seed=0), chain_data([3, 4], seed=1)
    with pm.Model():
        W = pm.Normal("W", 0.0, 1.0, shape=(2, 3))
        V = pm.Normal("V", 0.0, 1.0, shape=(1, 3, 3))
        pmc.CRF("y", graphs=train.graphs, node_features=train.node_features, node_weights=W,
                edge_features=train.edge_features, edge_weights=V, observed=train.labels)
        expected = {}
        for method in ("map", "bethe_laplace"):
            options = {} if method == "map" else dict(draws=40, random_seed=0)
            result = pmc.fit(method=method, **options)
            result.to_netcdf(HERE / f"saved_{method}_result.nc")
            how = "map" if method == "map" else "average"
            expected[method] = pmc.predict(result, test, method=how).marginals
    np.savez(HERE / "saved_expected.npz", node_features=test.node_features,
             edge_features=test.edge_features, lengths=np.array([3, 4]), labels=test.labels,
             **{f"marginals_{m}": v for m, v in expected.items()})


if __name__ == "__main__":
    main()
