"""Parallel data: sources, cleaning, the synthetic corpus, ``prepare`` and prepared directories.

Entry points: :func:`nmt_cli.data.prepare.prepare` and :class:`nmt_cli.data.prepared.PreparedData`.
"""
