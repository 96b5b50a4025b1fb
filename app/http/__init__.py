"""HTTP plumbing shared by the HTTP frontends: middleware and the mapping of errors to
statuses (no routes here)."""
