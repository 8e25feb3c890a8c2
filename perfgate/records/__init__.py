"""What perfgate writes and reads: results, summaries, fingerprints, baselines, micro-benchmark baselines; and the
shapes of what is judged (verdicts, comparisons, counts, diagnoses, the lab's reading), which `perfgate.judge`
computes and `perfgate.report` renders.

Imports only the base modules (errors, variants, project, workload); never measures or judges.
"""
