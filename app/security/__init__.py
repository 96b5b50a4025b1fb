"""Who may call what: Triton's restricted API groups, and what a load request may carry."""
