"""MetaSchedule rebuilds its logging config from its logger's handler names and crashed on an
unnamed handler (pytest's capture handlers; an application's own): the second tuning run in
one process failed with "'NoneType' object has no attribute 'format'" (a CI failure)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

pytestmark = [pytest.mark.tvm]


def test_tuning_logs_survive_an_unnamed_handler(tmp_path: Path) -> None:
    from tvm.s_tir.meta_schedule.logging import get_loggers_from_work_dir

    from farm.routes.tvm.api_tune import _unnamed_handlers_detached

    logger = logging.getLogger("tvm.s_tir.meta_schedule")
    foreign = logging.NullHandler()  # no name, like pytest's LogCaptureHandler
    logger.addHandler(foreign)
    try:
        with _unnamed_handlers_detached(logger):
            get_loggers_from_work_dir(str(tmp_path / "a"), ["task"])
            get_loggers_from_work_dir(str(tmp_path / "b"), ["task"])
        assert foreign in logger.handlers  # put back afterwards
        with pytest.raises(AttributeError):  # what MetaSchedule does without the guard
            get_loggers_from_work_dir(str(tmp_path / "c"), ["task"])
    finally:
        logger.removeHandler(foreign)
