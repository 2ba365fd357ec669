"""What /metrics shows a caller who is not the operator: counts, no lane names."""

from __future__ import annotations

from messaging.web.metrics import without_lanes


def test_each_lanes_depth_is_added_into_its_transports_shared_queue():
    depths = {"deliver.inbox": 2, "deliver.inbox.bulk": 5, "deliver.inbox.x.y": 1,
              "deliver.webhook": 0, "deliver.webhook.bulk": 3, "courier.sweep": 4}
    assert without_lanes(depths, ["inbox", "webhook"]) == {
        "deliver.inbox": 8, "deliver.webhook": 3, "courier.sweep": 4}


def test_a_kind_whose_name_begins_another_keeps_its_own_queue():
    depths = {"deliver.web": 1, "deliver.webhook": 2, "deliver.webhook.lane": 3}
    assert without_lanes(depths, ["web", "webhook"]) == {"deliver.web": 1, "deliver.webhook": 5}
