"""runs.db: the Store that reads and writes every record (runs_db), and the migrations that make its
schema (migrations). May import verdict, models."""

from autotune.store.migrations import MIGRATIONS
from autotune.store.runs_db import (
    ATTEMPTS_BEFORE_FAILURE, CUT_STATUSES, ENVIRONMENT, RERUN_STATUSES, Store, attempt_boxes, check_writable,
)
