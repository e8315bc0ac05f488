"""Translation engines, one module each, registered in :data:`nmt_cli.registry.ENGINES` (``--engine``):
loaders of model directories into objects with the :class:`~nmt_cli.decoding.Translator` interface."""
