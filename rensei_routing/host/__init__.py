"""The host (daemon) side of ruleset snapshots: the verified local cache, fetching, serving."""
