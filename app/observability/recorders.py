"""Several `StatisticsRecorder`s as one (statistics and metrics, traces): one that fails is
logged and never fails the request, nor keeps the others from recording it."""

from __future__ import annotations

import logging

from app.core.timing import RequestTiming, StatisticsRecorder

logger = logging.getLogger(__name__)


class Recorders:
    def __init__(self, *recorders: StatisticsRecorder) -> None:
        self._recorders = recorders

    def record_request(self, timing: RequestTiming) -> None:
        for recorder in self._recorders:
            try:
                recorder.record_request(timing)
            except Exception:
                logger.exception(
                    "recording request %s failed in %s", timing.request_id, type(recorder).__name__
                )
