"""guardeval: asynchronous guard-evaluation harness.

Data flows one way: cohort -> schedule -> dispatch -> raw log -> decisions -> estimates.
"""

__version__ = "0.1.0"
