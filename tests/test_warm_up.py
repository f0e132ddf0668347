"""pymc_crf.warm_up: ``pymc-crf warm-up``."""

import io
import logging

from pymc_crf import compile_notice, warm_up


class _Uncompiled:
    """A stand-in for a numba dispatcher with nothing compiled, in memory or on disk."""

    signatures = ()


def test_warm_up_does_not_print_the_first_use_notices(monkeypatch, caplog):
    # the notices end in "`pymc-crf warm-up` compiles every kernel ahead of time": inside the
    # warm-up they told the user to run what was running, in the middle of its step lines
    monkeypatch.setattr(compile_notice, "_announced", set())
    monkeypatch.setattr(compile_notice, "_compiled_on_disk", lambda dispatcher: False)

    def step(rng):
        compile_notice.first_use_notice(_Uncompiled(), "a test kernel")

    monkeypatch.setattr(warm_up, "STEPS", {"a test step": step})
    monkeypatch.setattr(compile_notice.logger, "propagate", True)  # to caplog
    out = io.StringIO()
    with caplog.at_level(logging.INFO, logger="pymc_crf"):
        warm_up.warm_up(out)
        assert not [r for r in caplog.records if "compiling" in r.getMessage()]
        assert out.getvalue().startswith("warm-up: a test step ... ")
        assert compile_notice.logger.level == logging.INFO  # restored
        compile_notice.first_use_notice(_Uncompiled(), "another kernel")  # outside: announced
        assert [r for r in caplog.records if "another kernel" in r.getMessage()]
