"""Research studies of Reinforce-Ada: multi-session experiments, each with its design, code, records and report.

Beside ``benchmarks/``, which measures the plug-in itself (speed, memory, sample efficiency), each study here
asks a research question, was designed before its runs and keeps its records: ``studies.learning`` (does
Reinforce-Ada learn more than GRPO, through verl's trainer) and ``studies.gradient_quality`` (whose update is
better, at fixed weights). ``studies.stats`` holds the statistics they share.
"""
