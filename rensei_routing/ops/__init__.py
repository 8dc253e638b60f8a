"""Operations on a home: doctor's checks, backup and restore, quickstart's steps.

Services composed from the store, the control and host sides and shadow mode; never imports the CLI.
"""
