"""nmt-cli: neural machine translation from the command line.

The package is layered so that imports flow one way:
``cli`` -> library modules (``training``, ``decoding``, ``evaluation``, ``alignment``,
``checkpoint``) -> ``models`` / ``data`` / ``tokenization`` -> ``config`` / ``registry``.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
