"""The host (daemon) side: the consumer of ruleset snapshots. Fetch, verify against trusted keys,
cache with rollback refusal and atomic persist, the poll loop, claims, status.

Owns orchestration over the pure snapshot rules; never imports the control side's store or the CLI.
"""
