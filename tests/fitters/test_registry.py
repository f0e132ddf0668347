"""The fitter and predictor registries: dispatch, options, errors."""

import pymc as pm
import pytest

import pymc_crf as pmc
from pymc_crf.fitters import registry
from pymc_crf.model.predictors import available_predictors, get_predictor, register_predictor


@pytest.fixture
def scratch_registry(monkeypatch):
    """Registrations made by a test are dropped afterwards."""
    monkeypatch.setattr(registry, "_FITTERS", dict(registry._FITTERS))
    from pymc_crf.model import predictors

    monkeypatch.setattr(predictors, "_PREDICTORS", dict(predictors._PREDICTORS))


def test_builtin_fitters_are_registered_by_name():
    from pymc_crf.fitters.beta_process import fit_bp_hcrf_vi
    from pymc_crf.fitters.ep import fit_ep
    from pymc_crf.fitters.map import fit_map
    from pymc_crf.fitters.nuts import fit_nuts

    for name, fn in (("map", fit_map), ("nuts", fit_nuts), ("ep", fit_ep),
                     ("bp_hcrf_vi", fit_bp_hcrf_vi)):
        assert name in pmc.fitters.available() and registry._FITTERS[name] is fn
    for name in ("average", "bpe", "map", "model_average", "bp_hcrf", "hcrf_average"):
        assert name in available_predictors()


def test_fit_dispatches_with_options_and_context(scratch_registry):
    calls = []

    @pmc.fitters.register("probe")
    def probe(model, **options):
        calls.append((model, options))
        return "result"

    with pm.Model() as m:
        pm.Normal("x")
        assert pmc.fit(method="probe", alpha=2) == "result"
    assert calls == [(m, {"alpha": 2})]
    with pytest.raises(ValueError, match="already registered"):
        pmc.fitters.register("probe")(lambda model: None)

    # a notebook cell run again: the same module and qualified name replace the old definition
    @pmc.fitters.register("probe")
    def probe(model, **options):  # noqa: F811
        return "redefined"

    with m:
        assert pmc.fit(method="probe") == "redefined"


def test_unknown_names_list_the_registered_ones(scratch_registry):
    with pm.Model() as m:
        pm.Normal("x")
    with pytest.raises(ValueError, match=r"unknown method 'nope'; available: \[.*'map'"):
        pmc.fit(m, method="nope")
    with pytest.raises(ValueError, match=r"unknown predict method 'nope'.*'average'"):
        get_predictor("nope")

    @register_predictor("probe")
    def probe(result, data, **options):
        return options

    assert get_predictor("probe") is probe


def test_predict_hands_a_predictor_its_own_options(scratch_registry):
    """A predictor with **options gets every option and the shared arguments; one that names its
    options gets those it names, and an option it does not name is refused."""
    import xarray as xr

    data = pmc.CRFData(pmc.GraphBatch.chains([2]), None)
    res = xr.DataTree()

    @register_predictor("open_probe")
    def open_probe(result, data, **options):
        return options

    @register_predictor("strict_probe")
    def strict_probe(result, data, *, inference="auto", temperature=1.0):
        return {"inference": inference, "temperature": temperature}

    got = pmc.predict(res, data, "open_probe", temperature=2.0)
    assert got["temperature"] == 2.0 and set(got) >= {"draws", "model", "inference"}
    assert pmc.predict(res, data, "strict_probe", temperature=2.0, inference="bp") == {
        "inference": "bp", "temperature": 2.0}
    with pytest.raises(TypeError, match="'strict_probe' has no option 'temprature'; its "
                                        "options: inference, temperature"):
        pmc.predict(res, data, "strict_probe", temprature=2.0)


def test_an_option_a_fitter_does_not_take_is_named_with_the_ones_it_takes(scratch_registry):
    @pmc.fitters.register("strict")
    def strict(model, *, draws: int = 10, seed=None):
        return draws

    with pm.Model() as m:
        pm.Normal("x")
    assert pmc.fit(m, method="strict", draws=3) == 3
    with pytest.raises(TypeError, match=r"method='strict' has no option 'tune'; its options: "
                                        r"draws, seed"):
        pmc.fit(m, method="strict", draws=3, tune=5)
