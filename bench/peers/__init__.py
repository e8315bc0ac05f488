"""Peer NMT toolkits, run side by side with nmt-cli in the benchmarks.

Each peer lives in its own virtualenv under ``bench/.peers/`` (git-ignored) and is
driven only through its own command-line tools: the project never imports a peer.

- ``install``: pinned, idempotent installation of every peer (``python bench/peers/install.py``).
- ``corpus``: writes our prepared SentencePiece pieces as plain text plus a vocabulary in
  each toolkit's format, so every toolkit sees the same pieces.
- ``arch``: the architecture and batch settings shared by every toolkit in one comparison.
- ``opennmt``, ``fairseq``: train and translate runners (CTranslate2 runs our own
  export through ``nmt translate --engine ctranslate2``, see ``translate_speed.py``).
"""
