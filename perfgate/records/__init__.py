"""What perfgate writes and reads: results, summaries, fingerprints, baselines, micro-benchmark baselines.

Imports only the base modules (errors, variants, project, workload); never measures or judges.
"""
