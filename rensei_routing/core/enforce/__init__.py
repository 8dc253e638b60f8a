"""Enforcement, pure: what an armed canary answers for one spawn (not governed, an enforced
route with its lineage, or a refusal), the canary's bound, the evidence gate's verdict over
recorded shadow evidence, the trip rule, and the audit records of each (docs/enforcement.md).
No I/O and no clock: the service (``rensei_routing.enforce``) reads the store and stamps time.
"""
