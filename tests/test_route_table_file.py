"""runners/routes.json is written under the state dir by whichever deploy thread needs it
first: parallel deploys (one thread per device) must never see another's half-renamed file."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from farm.routes import ROUTES, agent_table_file


def test_parallel_writers_never_lose_the_table(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    errors: list[BaseException] = []

    def write() -> None:
        try:
            for _ in range(20):
                agent_table_file()
        except BaseException as exc:
            errors.append(exc)

    for attempt in range(20):  # the race is in the first writes of a fresh state dir
        monkeypatch.setenv("FARM_HOME", str(tmp_path / f"home{attempt}"))
        threads = [threading.Thread(target=write) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert not errors, errors[:3]
    table = json.loads(agent_table_file().read_text())
    assert set(table["routes"]) == set(ROUTES)
    assert not [p for p in agent_table_file().parent.iterdir() if p.name != "routes.json"]
