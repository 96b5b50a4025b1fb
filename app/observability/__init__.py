"""Logs and metrics every frontend shares: access-log records, log set-up, load gauges."""
