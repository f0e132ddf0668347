"""The ``pymc-crf`` command: subcommands, argument errors, the demo's output order, benchmarks."""

import subprocess
import sys
import types

import pytest

import pymc_crf as pmc
from pymc_crf import cli
from pymc_crf.cli import main, run_demo


def test_cli_demo_runs_map(capsys):
    table, results = run_demo("loop", n_train=5, n_test=20, seed=0, methods=("map",),
                              progressbar=False)
    assert "test_error" in table.columns and 0 <= table.loc["map", "test_error"] <= 1
    out = capsys.readouterr().out
    assert "map" in out and "..." not in out.splitlines()[-1]  # the whole table, never cut
    assert all(col in out for col in table.columns)


def test_demo_legend_explains_every_column(capsys):
    """Each column of the printed table has a line under 'columns:' (elpd_loo's line covers
    elpd_loo_se and p_loo), including the Laplace fit's BP checks and evidence."""
    table, _ = run_demo("loop", n_train=30, n_test=20, seed=0, methods=("map", "laplace"),
                        progressbar=False)
    legend = capsys.readouterr().out.split("columns:")[1]
    assert {"converged", "bound_ok", "log_marginal_likelihood"} <= set(table.columns)
    missing = [c for c in table.columns
               if f"  {c}: " not in legend and c not in ("elpd_loo_se", "p_loo")]
    assert not missing, legend


def test_demo_reports_a_method_that_refuses_its_model_and_goes_on(capsys):
    """The demo's model has probit potentials, which the randomized MAP refuses: the demo (and
    ``--methods all``) prints the fitter's reason and compares the methods that fit."""
    table, results = run_demo("loop", n_train=5, n_test=20, seed=0,
                              methods=("randomized_map", "map"), progressbar=False)
    assert list(results) == ["map"] and list(table.index) == ["map"]
    out = capsys.readouterr().out
    assert "randomized_map did not fit the demo's model: method='randomized_map' takes " \
        "log-linear potentials" in out
    with pytest.raises(ValueError, match="none of the methods randomized_map fits"):
        run_demo("loop", n_train=5, n_test=20, methods=("randomized_map",), progressbar=False)


def test_demo_announces_itself_before_any_fit(monkeypatch, capsys):
    """What the demo does is printed before the first fit starts (a first NUTS fit compiles for
    minutes): the output captured when pmc.fit is first called already holds it."""
    real_fit, seen = pmc.fit, []

    def spy(model, method, **opts):
        seen.append(sys.stdout.getvalue())
        assert opts["progressbar"] is False
        return real_fit(model, method=method, **opts)

    monkeypatch.setattr(pmc, "fit", spy)
    assert main(["demo", "--kind", "loop", "--n-train", "3", "--n-test", "5", "--methods", "map",
                 "--no-progressbar"]) == 0
    first = seen[0].splitlines()
    assert first[0].startswith("pymc-crf demo: loop data, methods map")
    assert first[-1].startswith("fitting map(")
    assert "fitted" in capsys.readouterr().out


def test_cli_does_not_import_pymc_before_it_prints():
    code = "import sys, pymc_crf.cli; print(sorted({'pymc', 'arviz', 'numba'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(("argv", "message"), [
    (["demo", "--n-train", "0"], "--n-train: must be >= 1, got 0"),
    (["demo", "--draws", "-5"], "--draws: must be >= 1, got -5"),
    (["demo", "--tune", "-1"], "--tune: must be >= 0, got -1"),
    (["demo", "--chains", "two"], "--chains: expected an integer, got 'two'"),
    (["demo", "--kind", "grid"], "--kind: invalid choice: 'grid'"),
    (["demo", "--methods", "map,,nuts"], "--methods: empty method name"),
    (["--n-test", "0"], "--n-test: must be >= 1, got 0"),   # bare flags go to the demo
    (["nope"], "invalid choice: 'nope'"),
    (["train", "x.txt", "-m", "m.nc", "--c2", "cv"],
     "--c2 takes a number > 0, 'evidence' or 'learned'; got 'cv'"),
    (["train", "x.txt", "-m", "m.nc", "--c2", "0"], "--c2 must be > 0; got 0"),
    # an unknown option, named with the subcommand's usage
    (["evaluate", "m.joblib", "x.txt", "--bogus"],
     "pymc-crf evaluate: error: unrecognized arguments: --bogus"),
])
def test_bad_values_give_one_argparse_error(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and message in errors[0], errors


def test_unknown_method_lists_the_valid_ones(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--methods", "map,bogus"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.splitlines()
    line = [x for x in err if "error:" in x]
    assert len(line) == 1 and "unknown 'bogus'" in line[0]
    for method in ("map", "nuts", "ep", "bethe_laplace"):
        assert method in line[0]
    assert "bp_hcrf_vi" not in line[0]  # a hidden-CRF fitter cannot fit the demo's CRF
    with pytest.raises(SystemExit):
        main(["demo", "--methods", "bp_hcrf_vi"])
    assert "fits hidden CRFs (pmc.HCRF); the demo model is a CRF" in capsys.readouterr().err


def test_bench_list_names_every_script(capsys):
    assert main(["bench", "--list"]) == 0
    out = capsys.readouterr().out
    names = [line.split()[0] for line in out.splitlines()]
    assert names == sorted(cli.bench_scripts()) and "bench_chain" in names


def _fake_checkout(tmp_path):
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "bench_echo.py").write_text(
        '"""Echo the arguments."""\nimport os, sys\nprint("echo", os.getcwd(), *sys.argv[1:])\n')
    return tmp_path


def test_bench_runs_a_script_by_name_from_the_root(monkeypatch, tmp_path, capfd):
    root = _fake_checkout(tmp_path)
    monkeypatch.setattr(cli, "repository_root", lambda: root)
    assert main(["bench", "echo", "--repeats", "3"]) == 0
    assert f"echo {root} --repeats 3" in capfd.readouterr().out


def test_bench_errors(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(cli, "repository_root", lambda: _fake_checkout(tmp_path))
    with pytest.raises(SystemExit) as exc:
        main(["bench", "nosuch"])
    assert exc.value.code == 2 and "no benchmark 'nosuch'; choose from bench_echo" in \
        capsys.readouterr().err
    monkeypatch.setattr(cli, "repository_root", lambda: tmp_path / "installed")
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--list"])
    assert exc.value.code == 2 and "source checkout" in capsys.readouterr().err


def test_plugin_subcommand_registers_when_its_package_exists(monkeypatch, capsys):
    plugin = types.ModuleType("pymc_crf.fakeplugin")
    plugin.add_arguments = lambda parser: parser.add_argument("--table", required=True)
    plugin.run = lambda args: print("table", args.table) or 0
    monkeypatch.setitem(sys.modules, "pymc_crf.fakeplugin", plugin)
    monkeypatch.setattr(cli, "PLUGINS", {"fakeplugin": "a plugin"})
    monkeypatch.setattr(cli, "_plugin_installed", lambda name: True)
    assert main(["fakeplugin", "--table", "5.1"]) == 0
    assert "table 5.1" in capsys.readouterr().out
    monkeypatch.setattr(cli, "_plugin_installed", lambda name: False)
    with pytest.raises(SystemExit) as exc:
        main(["fakeplugin", "--table", "5.1"])
    assert exc.value.code == 2


class _FakeTagger:
    """What ``pymc-crf tag`` needs of a model: its feature format and ``_tag`` (every token
    tagged ``X``), so that reading the input is tested without fitting one."""

    metadata_ = {"features": {"format": "columns", "template": "w[0]", "columns": ["w"],
                              "n_features": 1}}

    def _tag(self, X, marginals, average=True):
        return [["X"] * len(s) for s in X], None


def test_tag_reads_gzip_from_standard_input(monkeypatch, capsys):
    # the help says plain or gzip, '-' for standard input: gzip bytes on standard input were
    # decoded as text and ended in a UnicodeEncodeError traceback
    import gzip
    import io

    monkeypatch.setattr(cli, "load_model", lambda path: _FakeTagger())
    for data in (gzip.compress(b"The\ncat\n\ndog\n"), "\ufeffThe\ncat\n\ndog\n".encode()):
        # as Python opens standard input (UTF-8 locale): undecodable bytes as surrogates
        stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="surrogateescape")
        monkeypatch.setattr(sys, "stdin", stdin)
        assert main(["tag", "model.joblib", "-", "--with-tokens"]) == 0
        assert capsys.readouterr().out == "The\tX\ncat\tX\n\ndog\tX\n\n"
