"""The parts of the word alignment bench that ``bench/align_quality.py`` runs.

``intervals`` (per-sentence counts and the paired bootstrap interval of an AER difference),
``settings`` (what every run shares: sizes, options, where it writes), ``corpora`` (the
text, and the dev, test and blind pairs each corpus reads), ``steps`` (running one command of the bench),
``training`` (the bench's training runs and ``nmt align bootstrap``), ``eflomal`` (the
external aligner and its guide links), ``systems`` (nmt-cli's aligners under test),
``scoring`` (aligning with a system, tuned readings, BLEU) and ``table`` (the report's
rows and notes). Each imports only those before it in this list.
"""
