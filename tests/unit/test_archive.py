"""The archive file format and the retention rules, without a server."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from messaging.service import archive
from messaging.store.retention import Stored, archived_buckets, final, newest_us

DAY = "2026-11-30"
PID = "prj_0123456789ab"


def test_appended_batches_read_back_with_the_last_line_of_each_id(tmp_path: Path) -> None:
    archive.append(tmp_path, PID, DAY, [{"id": "msg_a", "created_ts": "2", "v": 1},
                                        {"id": "msg_b", "created_ts": "1", "v": 1}])
    archive.append(tmp_path, PID, DAY, [{"id": "msg_a", "created_ts": "2", "v": 2}])
    path = archive.path(tmp_path, PID, DAY)
    with gzip.open(path, "rt") as f:  # two gzip members, one stream for any reader
        assert len(f.read().splitlines()) == 3
    assert archive.read(tmp_path, PID, DAY) == [{"id": "msg_b", "created_ts": "1", "v": 1},
                                               {"id": "msg_a", "created_ts": "2", "v": 2}]
    assert archive.days(tmp_path, PID) == [DAY]


@pytest.mark.parametrize(("project_id", "day"), [("../etc", DAY), (PID, "2026-1-1"),
                                                 (PID, "../../x")])
def test_a_malformed_project_or_day_names_no_file(tmp_path: Path, project_id: str,
                                                   day: str) -> None:
    with pytest.raises(ValueError):
        archive.path(tmp_path, project_id, day)


def test_day_of_is_the_utc_day() -> None:
    assert archive.day_of(1_764_547_199_999_999) == "2025-11-30"
    assert archive.day_of(1_764_547_200_000_000) == "2025-12-01"


@pytest.mark.parametrize(("delivery", "is_final"), [
    ({"outcome": "accepted", "lease_until_ms": "0"}, True),
    ({"outcome": "unknown", "lease_until_ms": "0"}, True),
    ({"outcome": "failed", "lease_until_ms": "0", "redrive": "1"}, False),  # redrive due
    ({"outcome": "accepted", "lease_until_ms": "1764547200000"}, False),  # leased again
    ({"stage": "target_selected", "lease_until_ms": "0"}, False),  # pending, held, waiting
    ({"stage": "dispatch_started", "retry_at_ms": "1764547200000"}, False),  # retrying
    ({"stage": "target_selected", "declined_us": "1"}, True),
])
def test_final_deliveries(delivery: dict[str, str], is_final: bool) -> None:
    assert final(delivery) is is_final


def test_newest_activity_is_the_latest_time_of_the_message_and_its_deliveries() -> None:
    stored = Stored("msg_a", {"created_us": "10"}, [("dlv_a", "agt_a"), ("dlv_b", "agt_b")],
                    [{"admitted_us": "10", "read_us": "40", "lease_until_ms": "99"},
                     {"ack_us": "30", "outcome": "accepted"}])
    assert newest_us(stored) == 40


# 2026-11-30 14:05:07 UTC
NOW_S = 1_796_047_507


def test_ids_removed_under_a_retention_of_days_are_kept_by_day() -> None:
    assert archived_buckets(NOW_S, 30 * 86_400) == [
        "2026-11-30", "2026-11-29", *(f"2026-11-{d:02d}" for d in range(28, 0, -1)),
        "2026-10-31", "2026-10-30"]
    assert archived_buckets(NOW_S, 86_400) == ["2026-11-30", "2026-11-29", "2026-11-28"]


def test_ids_removed_under_a_shorter_retention_are_kept_by_that_period() -> None:
    # Five minutes: a hash per five minutes from the epoch, the last three answer.
    assert archived_buckets(NOW_S, 300) == ["2026-11-30T140500", "2026-11-30T140000",
                                            "2026-11-30T135500"]
    assert archived_buckets(NOW_S, 0.5) == ["2026-11-30T140507", "2026-11-30T140506"]


def test_expire_deletes_days_that_ended_more_than_keep_days_ago(tmp_path: Path) -> None:
    for day in ("2026-11-28", "2026-11-29", "2026-11-30"):
        archive.append(tmp_path, PID, day, [{"id": "msg_a", "created_ts": "1"}])
    noon_dec_1 = 1_796_126_400.0  # 2026-12-01T12:00:00Z
    assert archive.expire(tmp_path, 0, noon_dec_1) == []  # 0 keeps everything
    assert archive.days(tmp_path, PID) == ["2026-11-28", "2026-11-29", "2026-11-30"]
    # 1.5 days before noon on Dec 1 is midnight Nov 30: the days before it have ended.
    gone = archive.expire(tmp_path, 1.5, noon_dec_1)
    assert gone == [archive.path(tmp_path, PID, d) for d in ("2026-11-28", "2026-11-29")]
    assert archive.days(tmp_path, PID) == ["2026-11-30"]


def test_archive_files_are_the_owner_s_alone(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    target = archive.append(root, PID, DAY, [{"id": "msg_a", "created_ts": "1"}])
    assert target.stat().st_mode & 0o777 == 0o600
    assert root.stat().st_mode & 0o777 == 0o700
    assert target.parent.stat().st_mode & 0o777 == 0o700
    assert archive.size_bytes(root) == target.stat().st_size > 0
