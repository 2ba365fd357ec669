"""Send, deliver, read, idle notices and the sweeper on a Valkey cluster: the same tests.

The tests are the single-node suite's own, imported here so that they run
again against this package's cluster stacks (see conftest.py). What is only
true of a cluster is tested in test_sharding.py and test_cluster_faults.py.
"""

from __future__ import annotations

import pytest

from tests.integration.test_delivery_worker import (
    own_stack,
    test_a_duplicate_delivery_task_changes_nothing,
    test_a_send_whose_publish_failed_is_published_by_the_sweeper,
)
from tests.integration.test_events import (
    listeners,
    test_new_mail_is_a_message_event_that_wakes_and_observes_nothing,
)
from tests.integration.test_idempotency import (
    test_a_replay_returns_the_stored_message_and_stores_nothing_new,
)
from tests.integration.test_idle_notices import (
    test_a_busy_target_going_idle_sends_one_notice_to_inbox_and_stream,
    test_a_message_goes_out_now_and_the_notice_waits_for_the_next_idle,
    test_a_subscription_whose_time_runs_out_gets_one_expired_notice,
    test_beat_sends_the_expired_notice_when_the_time_runs_out,
    test_one_notice_per_subscription_when_50_presence_reports_race,
)
from tests.integration.test_operations import (
    limited,
    test_a_token_over_its_rate_gets_429_with_retry_after,
)
from tests.integration.test_reading import (
    test_a_reply_keeps_the_thread_and_goes_to_the_original_sender,
    test_a_thread_lists_what_the_caller_may_see_oldest_first,
    test_ack_is_idempotent_keeps_the_read_time_and_returns_the_same_timestamps,
    test_fetching_records_delivery_observed_and_leaves_the_message_unread,
    test_message_deliveries_list_every_recipient_for_the_sender_and_the_project,
)
from tests.integration.test_round_trip import (
    test_body_comes_back_byte_for_byte_and_all_five_stages_are_recorded,
)
from tests.integration.test_search import (
    mail,
    test_a_star_makes_a_word_a_prefix,
    test_every_word_must_match_in_subject_or_body,
    test_mail_is_indexed_after_the_store_forgot_its_scripts,
    test_the_project_token_searches_every_message,
)
from tests.integration.test_search_indexing import (
    _close_made,
    test_nothing_is_indexed_while_a_project_waits_on_the_shared_queue,
    test_the_sweeper_indexes_a_queue_that_the_list_of_queues_missed,
)
from tests.integration.test_send_rules import test_100_recipients_in_all_are_admitted

# Its tests start processes of their own (stacks, API processes, `courier up`, the
# CLI) or wait out real deadlines: the slow tier (`./dev test --all`).
pytestmark = pytest.mark.slow

# Imported to run here: pytest collects tests and fixtures by name from this module.
__all__ = [
    "_close_made",
    "limited",
    "listeners",
    "mail",
    "own_stack",
    "test_100_recipients_in_all_are_admitted",
    "test_a_busy_target_going_idle_sends_one_notice_to_inbox_and_stream",
    "test_a_duplicate_delivery_task_changes_nothing",
    "test_a_message_goes_out_now_and_the_notice_waits_for_the_next_idle",
    "test_a_replay_returns_the_stored_message_and_stores_nothing_new",
    "test_a_reply_keeps_the_thread_and_goes_to_the_original_sender",
    "test_a_send_whose_publish_failed_is_published_by_the_sweeper",
    "test_a_star_makes_a_word_a_prefix",
    "test_a_subscription_whose_time_runs_out_gets_one_expired_notice",
    "test_a_thread_lists_what_the_caller_may_see_oldest_first",
    "test_a_token_over_its_rate_gets_429_with_retry_after",
    "test_ack_is_idempotent_keeps_the_read_time_and_returns_the_same_timestamps",
    "test_beat_sends_the_expired_notice_when_the_time_runs_out",
    "test_body_comes_back_byte_for_byte_and_all_five_stages_are_recorded",
    "test_every_word_must_match_in_subject_or_body",
    "test_fetching_records_delivery_observed_and_leaves_the_message_unread",
    "test_mail_is_indexed_after_the_store_forgot_its_scripts",
    "test_nothing_is_indexed_while_a_project_waits_on_the_shared_queue",
    "test_message_deliveries_list_every_recipient_for_the_sender_and_the_project",
    "test_new_mail_is_a_message_event_that_wakes_and_observes_nothing",
    "test_one_notice_per_subscription_when_50_presence_reports_race",
    "test_the_project_token_searches_every_message",
    "test_the_sweeper_indexes_a_queue_that_the_list_of_queues_missed",
]
