"""Workloads from the training frameworks people use: thin adapters that read what the framework already knows.

`from_trainer` (a Hugging Face `transformers.Trainer`) and `from_lightning` (a Lightning `LightningModule`) each
return a `perfgate.Workload` whose own `step` runs the framework's training step. Each framework is imported only
when its adapter is called: neither is a dependency of perfgate's core.
"""
