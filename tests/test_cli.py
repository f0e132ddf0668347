"""The ``pymc-crf demo`` command."""

from pymc_crf.cli import main, run_demo


def test_cli_demo_runs_map(capsys):
    table, results = run_demo("loop", n_train=5, n_test=20, seed=0, methods=("map",))
    assert "test_error" in table.columns and 0 <= table.loc["map", "test_error"] <= 1
    assert "map" in capsys.readouterr().out


def test_cli_main_rejects_unknown_command(capsys):
    import pytest

    with pytest.raises(SystemExit):
        main(["nope"])
